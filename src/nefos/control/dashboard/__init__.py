"""The web console: pages for people over the same APIs the CLIs use (Horizon's place)."""
