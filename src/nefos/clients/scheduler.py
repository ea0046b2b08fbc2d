"""The client for the scheduler, over the bus (topic ``scheduler``): one method per declared method
of the scheduler interface (``nefos.bus.interfaces.SCHEDULER``), as Nova's ``SchedulerAPI``. The
conductor is its caller."""

from __future__ import annotations

from nefos.bus import interfaces
from nefos.bus.versioning import RPCClient


class SchedulerAPI:
    def __init__(self, bus):
        self.bus = bus
        self.client = RPCClient(bus, interfaces.SCHEDULER)

    async def select_destinations(self, ctx, request_spec: dict, instance_uuids: list[str]) -> list[dict]:
        return await self.client.call(ctx, "select_destinations", request_spec=request_spec,
                                      instance_uuids=instance_uuids)
