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

    def closing(self) -> None:
        """The process is stopping: end what would keep ``app``'s connections open (a stream)
        before its server waits for them to close."""

    async def stop(self) -> None:
        pass
