"""A fake L2 agent for the fake hypervisor: one per compute host, in the compute host's process.

It plays Neutron's Open vSwitch agent: the fake driver tells it when it
plugs or unplugs a VIF (``device_plugged`` / ``device_unplugged``, as the OVS
agent sees ports appear in OVSDB), and ``fake_l2_agent_delay`` seconds later
it reports over the bus (``nefos.control.network.agent_rpc``): ``get_device_details``
then ``update_device_up`` for a plugged device (the port goes BUILD, then
ACTIVE, and the server gets ``network-vif-plugged``), ``update_device_down``
for an unplugged one (unless it was plugged again meanwhile, as in a hard
reboot: then only the new plug is reported). Reports are made in order, one
at a time; a failed report is retried.

A port whose ``admin_state_up`` is false carries nothing, as with the real agent
(``nefos.agents.l2_agent``): the agent serves ``q-agent-notifier`` like every L2 agent and,
told of such a port plugged here (``port_update``), reports its device down (the port DOWN); told it is
up again, it reports the device up (BUILD, then ACTIVE).

``stop()`` and ``start()`` act out an agent that is down: while the agent is
stopped nothing is reported, so the ports of new guests stay DOWN; when it
starts again it resynchronises with the switch (the driver's plugged VIFs):
devices plugged meanwhile are reported up, devices gone meanwhile down. What
the agent has reported is kept on the driver (the switch's memory), so a new
agent for the same driver (a restarted compute process) carries on.
"""

from __future__ import annotations

import asyncio
import logging

from tenacity import RetryCallState, retry_if_exception_type, wait_fixed

from nefos.clients.network_agents import L2_AGENT_TOPIC, L2AgentEndpoint, L2PluginAPI as PluginAPI, report_context
from nefos.waiting import retrying

LOG = logging.getLogger(__name__)

RETRY_DELAY = 1.0


class FakeL2Agent:
    def __init__(self, rt, host: str, driver, delay: float | None = None):
        self.rt = rt
        self.host = host
        self.driver = driver
        self.delay = rt.cfg.fake_l2_agent_delay if delay is None else delay
        self.agent_id = f"fake-l2-agent-{host}"
        self.plugin = PluginAPI(rt.bus, host, self.agent_id)
        self.running = False
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        # device -> "up" once reported up; kept on the driver so it survives a new agent object
        self.reported: dict[str, str] = driver.__dict__.setdefault("l2_agent_reported", {})
        self.endpoint = L2AgentEndpoint(self)
        driver.vif_listener = self

    # The driver's callbacks (synchronous, never block) ---------------------------------
    def device_plugged(self, device: str) -> None:
        self._enqueue("up", device)

    def device_unplugged(self, device: str) -> None:
        self._enqueue("down", device)

    # What the network service says (q-agent-notifier) ------------------------------------
    def port_updated(self, port_id: str) -> None:
        """``port_id``'s ``admin_state_up`` changed: look at its device again if it is plugged here."""
        if port_id in self.driver.plugged_vifs:
            self.device_plugged(port_id)

    def fdb_changed(self, network_ids: list[str] | None) -> None:
        """L2 population: the fake switch has no tunnels."""

    def _enqueue(self, kind: str, device: str) -> None:
        if not self.running or self._queue is None:
            return  # a stopped agent sees nothing; start() resynchronises
        loop = asyncio.get_running_loop()
        self._queue.put_nowait((loop.time() + self.delay, kind, device))

    # Lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        if self.running:
            return
        self.running = True
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._work(), name=f"{self.agent_id}")
        await self.rt.bus.serve(L2_AGENT_TOPIC, self.endpoint, host=self.host)
        # Resynchronise with the switch: what changed while the agent was not looking.
        plugged = set(self.driver.plugged_vifs)
        for device in sorted(plugged):
            if self.reported.get(device) != "up":
                self.device_plugged(device)
        for device in sorted(set(self.reported) - plugged):
            self.device_unplugged(device)
        LOG.info("%s started", self.agent_id)

    async def stop(self) -> None:
        if self.running:
            await self.rt.bus.unserve(self.endpoint)
        self.running = False
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        self._queue = None
        LOG.info("%s stopped", self.agent_id)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until every report queued so far was made (tests)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._queue is not None and (self._queue.qsize() or self._busy):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{self.agent_id} still busy")
            await asyncio.sleep(0.01)

    _busy = False

    # The worker ------------------------------------------------------------------
    async def _work(self) -> None:
        queue = self._queue
        loop = asyncio.get_running_loop()
        while True:
            due, kind, device = await queue.get()
            self._busy = True
            try:
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                def log_retry(state: RetryCallState) -> None:
                    LOG.warning("%s: reporting device %s %s failed (%s); retrying", self.agent_id, device, kind,
                                state.outcome.exception())
                async for attempt in retrying(retry=retry_if_exception_type(Exception), wait=wait_fixed(RETRY_DELAY),
                                              before_sleep=log_retry):
                    with attempt:
                        await self._report(kind, device)
            finally:
                self._busy = False

    async def _report(self, kind: str, device: str) -> None:
        with report_context():
            if kind == "up":
                if device not in self.driver.plugged_vifs:
                    return  # unplugged again before we got to it
                LOG.info("%s: device %s plugged: reporting it", self.agent_id, device)
                details = await self.plugin.get_device_details(device)
                if "port_id" not in details:
                    LOG.debug("%s: device %s is not a port bound here", self.agent_id, device)
                    return
                if not details.get("admin_state_up", True):
                    self.reported.pop(device, None)
                    await self.plugin.update_device_down(device)
                    LOG.info("%s: device %s administratively down: taken down", self.agent_id, device)
                    return
                await self.plugin.update_device_up(device)
                self.reported[device] = "up"
                LOG.info("%s: device %s up", self.agent_id, device)
            else:
                if device in self.driver.plugged_vifs:
                    return  # plugged again before we looked (a hard reboot): the "up" that follows reports it
                self.reported.pop(device, None)
                await self.plugin.update_device_down(device)
                LOG.info("%s: device %s down", self.agent_id, device)


def attach(rt, host: str, driver) -> FakeL2Agent | None:
    """The fake agent for ``driver`` when it is a fake hypervisor and ``fake_l2_agent`` is on."""
    if not rt.cfg.fake_l2_agent or not hasattr(driver, "plugged_vifs"):
        return None
    return FakeL2Agent(rt, host, driver)
