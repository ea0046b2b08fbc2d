"""The L3 agent (Neutron's legacy L3 agent, reduced): routers and floating IPs in namespaces.

Every router (administratively up) of the cloud gets a namespace ``qrouter-<router id>`` on this
machine (``nefos.agents.router_ns`` says what is in it): its interfaces plugged into their
networks' bridges, its gateway into the Nefos external bridge (``l3_external_bridge``, default
``br-ex-nefos``), forwarding on and NAT (nftables) inside the namespace only. The external
bridge is a Linux bridge of Nefos's own: the agent creates it when missing and only ever puts
its routers' gateway veths into it, never a physical interface; nothing is routed or NATed
through the machine's own interfaces (a router forwards through its gateway only to and from the
external subnet, even when the host forwards), no host sysctl, route or firewall rule is touched.

When to look, as the DHCP agent (``nefos.agents.dhcp_agent``): the network service fans out
``routers_updated`` (bus topic ``l3_agent``, ``nefos.control.network.l3_rpc``) after a change to a router,
its interfaces or gateway, or a floating IP committed, and the agent syncs those routers at once;
notifications arriving while a sync runs coalesce into one more sync. Every
``l3_agent_sync_interval`` seconds (5) it syncs every router, the backstop for a lost
notification. A sync asks the network service (``sync_routers`` on ``q-l3-plugin``) and applies
what changed (a digest per router): idempotent. Routers that are gone (or administratively down)
lose their namespace. ``stop()`` removes the namespaces it made.

Routers are not scheduled: every L3 agent serves every router, so a cloud runs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import shutil

from nefos.agents import router_ns
from nefos.agents.agent_sync import SyncLoop
from nefos.component import Component
from nefos.clients.network_agents import L3_AGENT_TOPIC as AGENT_TOPIC, L3AgentEndpoint, L3PluginAPI
from nefos.agents.ip_lib import ensure_bridge

LOG = logging.getLogger(__name__)


def _digest(router: dict) -> str:
    return hashlib.sha256(json.dumps(router, sort_keys=True).encode()).hexdigest()


class L3Agent(SyncLoop, Component):
    log = LOG

    def __init__(self, rt, host: str | None = None, interval: float | None = None,
                 external_bridge: str | None = None):
        self.rt = rt
        self.host = host or rt.cfg.host
        self.name = f"l3-agent:{self.host}"
        self.interval = interval if interval is not None else rt.cfg.l3_agent_sync_interval
        self.external_bridge = external_bridge or rt.cfg.l3_external_bridge
        self.plugin = L3PluginAPI(rt.bus, self.host)
        self.endpoint = L3AgentEndpoint(self)
        self.applied: dict[str, dict] = {}  # router id -> the configuration its namespace has
        self._digests: dict[str, str] = {}
        self._synced = asyncio.Condition()
        self._init_sync_loop()

    # Lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        missing = [b for b in ("ip", "nft") if shutil.which(b) is None]
        if missing:
            LOG.error("%s: %s not installed (apt-get install iproute2 nftables); no routers here",
                      self.name, ", ".join(missing))
            return
        await ensure_bridge(self.external_bridge)
        await self._serve_and_loop(AGENT_TOPIC)
        LOG.info("%s started (routers in qrouter- namespaces, gateways on %s; on notifications, all "
                 "routers every %.1f s)", self.name, self.external_bridge, self.interval)

    async def stop(self) -> None:
        await self._unserve_and_stop_loop()
        for router_id in list(self.applied):
            with contextlib.suppress(Exception):
                await router_ns.destroy(router_id)
            self._forget(router_id)

    def routers_changed(self, router_ids: list[str]) -> None:
        """The network service says these routers changed: sync them as soon as the current sync
        (if any) ends."""
        self._mark_changed(router_ids)

    @property
    def router_syncs(self) -> int:
        return self.partial_syncs

    async def _after_pass(self) -> None:
        async with self._synced:
            self._synced.notify_all()

    async def wait_for(self, predicate, timeout: float = 15.0) -> None:
        """Until ``predicate()`` holds after a sync (for tests and operators' scripts)."""
        async def until():
            async with self._synced:
                await self._synced.wait_for(predicate)
        await asyncio.wait_for(until(), timeout)

    # Sync ------------------------------------------------------------------------------------------
    async def sync(self, router_ids: set[str] | None = None) -> None:
        """Bring the namespaces in line with the routers ``router_ids`` (None: every router)."""
        routers = await self.plugin.sync_routers(None if router_ids is None else sorted(router_ids))
        wanted = {r["id"]: r for r in routers if r["admin_state_up"]}
        scope = set(self.applied) if router_ids is None else set(router_ids)
        for router_id in sorted(scope - set(wanted)):
            if router_id in self.applied or router_ns.netns_exists(router_ns.namespace(router_id)):
                LOG.info("%s: router %s is gone (or down)", self.name, router_id)
                await router_ns.destroy(router_id)
            self._forget(router_id)
        for router_id, router in wanted.items():
            digest = _digest(router)
            if self._digests.get(router_id) == digest and router_ns.netns_exists(router_ns.namespace(router_id)):
                continue
            try:
                await router_ns.apply(router, self.external_bridge, self.applied.get(router_id))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.warning("%s: router %s: %s", self.name, router_id, exc)
                continue
            self.applied[router_id] = router
            self._digests[router_id] = digest

    def _forget(self, router_id: str) -> None:
        self.applied.pop(router_id, None)
        self._digests.pop(router_id, None)


def component(rt, host: str | None = None) -> Component:
    return L3Agent(rt, host)
