"""The identity service as a component: the Keystone v3 API, bootstrapped at start."""

from __future__ import annotations

import asyncio

from nefos.db.retry import at_start
from nefos.clients.identity import tokens
from nefos.control.identity.bootstrap import bootstrap
from nefos.control.identity.rest import create_app
from nefos.service import Component, PeriodicTask

PRUNE_INTERVAL = 3600.0


class IdentityComponent(Component):
    name = "identity"

    def __init__(self, rt):
        self.rt = rt
        self.app = create_app(rt)
        self.port = rt.cfg.identity_api_port
        self.credentials: dict | None = None
        self._prune: asyncio.Task | None = None

    async def start(self) -> None:
        self.credentials = await at_start(lambda: bootstrap(self.rt))
        await at_start(lambda: tokens.prune_revocation_events(self.rt))
        task = PeriodicTask("prune-revocation-events", PRUNE_INTERVAL,
                            lambda: tokens.prune_revocation_events(self.rt))
        self._prune = asyncio.create_task(task.run_forever(), name="identity:prune")

    async def stop(self) -> None:
        if self._prune is not None:
            self._prune.cancel()
            await asyncio.gather(self._prune, return_exceptions=True)
            self._prune = None


def component(rt) -> Component:
    return IdentityComponent(rt)
