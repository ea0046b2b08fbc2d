"""A hypervisor host: its compute manager and its hypervisor drivers. It never opens the database."""
