"""Nefos: a compact, asyncio-native, OpenStack-compatible compute cloud."""

__version__ = "0.10.0.dev0"
