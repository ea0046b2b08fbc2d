"""The unit a Nefos process runs (``nefos up`` runs them all, ``nefos <service>`` one): apart from
``nefos.service`` so that a process without a database (a network agent) can run one."""

from __future__ import annotations


class Component:
    """One piece a process runs: a service on the bus and/or an HTTP API.

    Each service package exposes ``component(rt, ...) -> Component`` in its
    ``service.py``; ``nefos up`` runs them all in one process, ``nefos
    <service>`` runs one. ``app`` (an ASGI app) is served on ``port`` when set.
    """

    name: str = "component"
    app = None
    port: int | None = None
    bind: str | None = None  # the address ``app`` is served on; None: bind_host

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
