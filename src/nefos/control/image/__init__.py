"""The image service: an Image API v2 (Glance-compatible) subset and its file store."""
