"""The console proxy (Nova's nova-novncproxy): browsers' websockets to guests' VNC servers."""
