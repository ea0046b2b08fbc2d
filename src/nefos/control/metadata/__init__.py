"""The metadata service (Nova's nova-api-metadata): what a guest learns about itself over HTTP."""
