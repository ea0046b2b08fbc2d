"""The commands: the CLI, everything in one process (``nefos up``), a deployment's health, its event
log."""
