"""The console page the proxy serves when its noVNC directory (``novncproxy_web``) has none.

It is a small noVNC client page (as noVNC's own ``vnc_lite.html``): it loads noVNC's RFB module
from the proxy's ``novncproxy_web`` directory and connects to the websocket named by the ``path``
query parameter, which carries the console token (Nova's console URLs).
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Console (noVNC)</title>
<style>
body { margin: 0; background: #000; color: #ddd; font: 14px sans-serif; }
#status { padding: 4px 8px; background: #333; }
#screen { height: calc(100vh - 28px); }
</style>
</head>
<body>
<div id="status">Loading the noVNC client...</div>
<div id="screen"></div>
<script type="module">
const status = document.getElementById("status");
const params = new URLSearchParams(window.location.search);
const path = (params.get("path") || "websockify").replace(/^\\//, "");
const scheme = window.location.protocol === "https:" ? "wss" : "ws";
try {
  const { default: RFB } = await import("./core/rfb.js");
  const rfb = new RFB(document.getElementById("screen"), `${scheme}://${window.location.host}/${path}`);
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => { status.textContent = "Connected"; });
  rfb.addEventListener("disconnect", (e) => {
    status.textContent = e.detail.clean ? "Disconnected" : "Connection lost";
  });
  rfb.addEventListener("desktopname", (e) => { status.textContent = e.detail.name; });
} catch (err) {
  status.textContent = "The noVNC client is not installed on this console proxy (novncproxy_web).";
}
</script>
</body>
</html>
"""
