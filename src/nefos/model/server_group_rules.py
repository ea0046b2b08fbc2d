"""Server group rules the scheduler and the compute hosts' late check both apply (no database)."""


def max_server_per_host(group: dict) -> int:
    """An anti-affinity group's members allowed on one host: its ``max_server_per_host`` rule (2.64), else 1."""
    return int((group.get("rules") or {}).get("max_server_per_host", 1))
