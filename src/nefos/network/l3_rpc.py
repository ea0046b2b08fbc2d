"""The L3 agent protocol (Neutron's L3 RPC, reduced): what the network service and the L3 agents say.

Agent -> service, topic ``q-l3-plugin`` (Neutron's ``topics.L3PLUGIN``): ``sync_routers``
gives each router's L3 configuration (interfaces, gateway, floating IPs, routes;
``Routers._routers_for_agent``); a router asked for and not returned is gone.

Service -> agents, topic ``l3_agent`` (fanout, Neutron's ``L3AgentNotifyAPI``): after a change
to a router, its interfaces or gateway, or a floating IP commits, ``routers_updated`` names the
routers; an agent syncs those at once (and every router every ``l3_agent_sync_interval``
seconds, the backstop for a lost notification), as the DHCP agent does for networks.
"""

from __future__ import annotations

import logging

from nefos.bus import Endpoint, interfaces
from nefos.bus.versioning import RPCClient
from nefos.context import RequestContext, admin_context
from nefos.network.agents.agent_sync import AgentNotifier

LOG = logging.getLogger(__name__)

PLUGIN_TOPIC = "q-l3-plugin"
AGENT_TOPIC = "l3_agent"


class L3PluginEndpoint(Endpoint):
    """Served by the network service on ``q-l3-plugin``: the one thing an L3 agent asks."""

    rpc_interface = interfaces.L3_PLUGIN

    def __init__(self, manager):
        self.manager = manager  # nefos.network.manager.NetworkManager

    async def sync_routers(self, ctx: RequestContext, agent_host: str, router_ids: list[str] | None = None) -> list[dict]:
        return await self.manager._routers_for_agent(router_ids)


class L3PluginAPI:
    """The agent's client of ``q-l3-plugin``."""

    def __init__(self, bus, host: str):
        self.bus = bus
        self.client = RPCClient(bus, interfaces.L3_PLUGIN)
        self.host = host

    async def sync_routers(self, router_ids: list[str] | None = None) -> list[dict]:
        # (``host`` would address the bus message: the agent's host travels as ``agent_host``)
        return await self.client.call(admin_context(), "sync_routers", agent_host=self.host,
                                      router_ids=None if router_ids is None else sorted(router_ids))


class L3AgentNotifier(AgentNotifier):
    """The network service's side of ``l3_agent``: a router change listener of the manager, each
    change fanned out in a task of its own (the change never waits for the bus nor fails with it)."""

    interface = interfaces.L3_AGENT
    agents = "L3 agents"
    log = LOG

    def _default_context(self) -> RequestContext:
        return admin_context()

    def routers_changed(self, ctx: RequestContext | None, router_ids: list[str]) -> None:
        router_ids = list(router_ids)
        self._fanout(ctx, f"routers {router_ids} changed", "routers_updated", router_ids=router_ids)


class L3AgentEndpoint(Endpoint):
    """The L3 agent's side of ``l3_agent``: the routers notified are synced at once."""

    rpc_interface = interfaces.L3_AGENT

    def __init__(self, agent):
        self.agent = agent  # nefos.network.agents.l3_agent.L3Agent

    async def routers_updated(self, ctx: RequestContext, router_ids: list[str]) -> None:
        self.agent.routers_changed(router_ids)
