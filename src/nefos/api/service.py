"""The Compute API as a component."""

from __future__ import annotations

from nefos.api.app import create_app
from nefos.compute.api import ComputeAPI
from nefos.service import Component, Service


class ComputeAPIComponent(Component):
    name = "compute-api"

    def __init__(self, rt):
        from nefos.image.client import ImageAPI
        from nefos.network.client import NetworkAPI
        self.rt = rt
        self.compute_api = ComputeAPI(rt, NetworkAPI(rt), ImageAPI(rt))
        self.app = create_app(rt, self.compute_api)
        self.port = rt.cfg.compute_api_port
        self.service = Service(rt, "nefos-api", None, rt.cfg.host)

    async def start(self) -> None:
        from nefos.compute.flavors import ensure_default_flavors
        from nefos.db.retry import at_start
        await at_start(lambda: ensure_default_flavors(self.rt.db))
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()


def component(rt) -> Component:
    return ComputeAPIComponent(rt)
