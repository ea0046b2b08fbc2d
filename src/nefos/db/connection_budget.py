"""How many database connections each process may hold, from the deployment's shape.

Every Nefos process opens exactly one engine (``nefos.service.Runtime.open``; ``nefos db
upgrade`` opens one of its own for the migration and closes it), whose pool holds at most
``max_pool_size + max_overflow`` connections. The database server's limit is shared by all of
them, so the budget is:

    available   = max_connections - superuser_reserved_connections - headroom
    per process = floor(available / processes)
    max_pool_size = per process, max_overflow = 0

``headroom`` keeps room for what is not a running service: an operator's psql, ``nefos db
upgrade``, monitoring, and a restarting process's old connections (a rolling restart has both
for a moment). The overflow is 0 on purpose: an overflow connection is closed as soon as it is
returned, so under load a process would keep opening and closing connections (a new PostgreSQL
backend each, milliseconds of CPU on both sides); a pool of ``per process`` kept connections
costs nothing more when idle than one that may grow to it.

PostgreSQL's defaults (max_connections 100, 3 reserved) with a headroom of 7 leave 90: the
defaults (``max_pool_size`` 5, ``max_overflow`` 0) fit 18 processes, e.g. a three-host
deployment's controller (2 api, 2 conductor, 2 scheduler, network, image, identity, metadata,
novncproxy: 11) and two compute hosts with a database connection (the releases before compute
hosts went bus-only), 13 processes, 65 connections. Beyond that, raise max_connections or put
PgBouncer (transaction pooling) in front (docs/deployment.md).
"""

from __future__ import annotations

SUPERUSER_RESERVED = 3  # PostgreSQL's superuser_reserved_connections default
HEADROOM = 7


def deployment_budget(max_connections: int, processes: int, *, headroom: int = HEADROOM,
                      reserved: int = SUPERUSER_RESERVED) -> dict:
    """Pool sizes for ``processes`` Nefos processes sharing a server of ``max_connections``."""
    if processes < 1:
        raise ValueError("a deployment has at least one process")
    available = max_connections - reserved - headroom
    per_process = available // processes
    if per_process < 1:
        raise ValueError(f"{processes} processes cannot share {available} connections: raise "
                         f"max_connections or put a connection pooler (PgBouncer) in front")
    return {"processes": processes, "max_connections": max_connections, "available": available,
            "max_pool_size": per_process, "max_overflow": 0, "budget": per_process * processes}
