"""The Compute API as a component."""

from __future__ import annotations

from nefos import metrics
from nefos.control.compute.rest import event_hub
from nefos.control.compute.rest.app import create_app
from nefos.control.compute.api import ComputeAPI
from nefos.service import Component, Service


class ComputeAPIComponent(Component):
    name = "compute-api"

    def __init__(self, rt):
        from nefos.control.image.client import ImageAPI
        from nefos.clients.network import NetworkAPI
        self.rt = rt
        self.compute_api = ComputeAPI(rt, NetworkAPI(rt), ImageAPI(rt))
        self.app = create_app(rt, self.compute_api)
        self.port = rt.cfg.compute_api_port
        self.service = Service(rt, "nefos-api", None, rt.cfg.host)
        self._unhook = None

    async def start(self) -> None:
        from nefos.control.compute.flavors import ensure_default_flavors
        from nefos.db.retry import at_start
        await at_start(lambda: ensure_default_flavors(self.rt.db))
        await self.service.start()
        # The Compute API serves os-services: its process exports what os-services says.
        self._unhook = metrics.on_scrape(self._service_gauges)

    def closing(self) -> None:
        event_hub.hub_of(self.app).end_streams()

    async def stop(self) -> None:
        if self._unhook is not None:
            self._unhook()
        await event_hub.hub_of(self.app).close()
        await self.service.stop()

    async def _service_gauges(self) -> None:
        from nefos.control.compute.services import list_services
        metrics.set_services(await list_services(self.rt.db, self.rt.cfg))


def component(rt) -> Component:
    return ComputeAPIComponent(rt)
