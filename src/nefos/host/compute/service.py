"""A compute host as a component: its manager on ``compute.<host>``, its driver, its periodic tasks."""

from __future__ import annotations

from nefos.host.compute import deadlines, node_identity
from nefos.model.binaries import COMPUTE_BINARY
from nefos.host.compute.manager import ComputeManager
from nefos.service import Component, ConductorServiceGroup, Service
from nefos.host.virt import load_driver


class ComputeComponent(Component):
    def __init__(self, rt, host: str, driver=None):
        from nefos.clients.network import NetworkAPI
        self.name = f"compute:{host}"
        self.host = host
        self.driver = driver or load_driver(rt.cfg.compute_driver, rt.cfg, host)
        self.manager = ComputeManager(rt, host, self.driver, NetworkAPI(rt))
        from nefos.agents import fake_agent
        self.l2_agent = fake_agent.attach(rt, host, self.driver)  # fake driver: its fake L2 agent
        self.service = Service(rt, COMPUTE_BINARY, "compute", host, endpoint=self.manager,
                               group=ConductorServiceGroup(self.manager.conductor),
                               on_return=self.manager.after_return)
        self.service.add_periodic("update_available_resource", 60.0,
                                  self.manager.periodic_update_available_resource)
        self.service.add_periodic("sync_power_states", rt.cfg.sync_power_state_interval,
                                  self.manager.periodic_sync_power_states)
        self.service.add_periodic("check_instance_deadlines", deadlines.check_interval(rt.cfg),
                                  self.manager.periodic_check_instance_deadlines)
        self.service.add_periodic("publish_vif_wait_stats", max(rt.cfg.report_interval, 1.0),
                                  self.manager.periodic_publish_vif_wait_stats)

    async def start(self) -> None:
        await self.manager.conductor.wait_until_ready()  # the host's only way to its database
        # Who this host is, checked before anything touches a guest (refuses to start on a mismatch).
        self.manager.resource_tracker.node_uuid = await self.manager.conductor.until_answered(
            lambda: node_identity.ensure_stable_identity(self.manager.rt, self.manager.conductor,
                                                         self.manager.host, self.manager.driver))
        if self.l2_agent is not None:
            await self.l2_agent.start()
        await self.service.listen()  # casts sent while init_host recovers wait for it
        await self.manager.init_host()
        await self.service.start()
        # The service row exists now: apply the driver's connection state to it (as Nova does at start).
        await self.manager.lifecycle.apply_connection_state()

    async def stop(self) -> None:
        await self.manager.cleanup_host()
        await self.service.stop()
        if self.l2_agent is not None:
            await self.l2_agent.stop()


def component(rt, host: str | None = None, driver=None) -> Component:
    return ComputeComponent(rt, host or rt.cfg.host, driver)
