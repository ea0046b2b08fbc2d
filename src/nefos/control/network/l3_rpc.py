"""The L3 agent protocol (Neutron's L3 RPC, reduced): what the network service and the L3 agents say.

Agent -> service, topic ``q-l3-plugin`` (Neutron's ``topics.L3PLUGIN``): ``sync_routers``
gives each router's L3 configuration (interfaces, gateway, floating IPs, routes;
``Routers.routers_for_agent``); a router asked for and not returned is gone. It first binds
the routers' interface and gateway ports to the asking agent's host (``binding:host_id``, as
Neutron's ``sync_routers`` does): L2 population then carries the router's MACs and addresses to
the hosts with ports on its networks, and that host's L2 agent reports the ``tap`` ends up.

Service -> agents, topic ``l3_agent`` (fanout, Neutron's ``L3AgentNotifyAPI``): after a change
to a router, its interfaces or gateway, or a floating IP commits, ``routers_updated`` names the
routers; an agent syncs those at once (and every router every ``l3_agent_sync_interval``
seconds, the backstop for a lost notification), as the DHCP agent does for networks.
"""

from __future__ import annotations

import logging

from nefos.bus import Endpoint, interfaces
from nefos.context import RequestContext, admin_context
from nefos.control.network.agent_notifier import AgentNotifier
from nefos.clients.network_agents import L3_AGENT_TOPIC as AGENT_TOPIC, L3_PLUGIN_TOPIC as PLUGIN_TOPIC  # noqa: F401
from nefos.clients.network_agents import L3AgentEndpoint, L3PluginAPI  # noqa: F401  (the agent's side)

LOG = logging.getLogger(__name__)


class L3PluginEndpoint(Endpoint):
    """Served by the network service on ``q-l3-plugin``: the one thing an L3 agent asks."""

    rpc_interface = interfaces.L3_PLUGIN

    def __init__(self, routers):
        self.routers = routers  # nefos.control.network.routers.Routers

    async def sync_routers(self, ctx: RequestContext, agent_host: str, router_ids: list[str] | None = None) -> list[dict]:
        """The L3 configuration of ``router_ids`` (None: every router), their ports bound to
        ``agent_host`` first (the agent plugs them there next; a port added meanwhile, not bound
        yet, comes with the next sync)."""
        await self.routers.bind_router_ports(agent_host, router_ids)
        return await self.routers.routers_for_agent(router_ids, agent_host)


class L3AgentNotifier(AgentNotifier):
    """The network service's side of ``l3_agent``: a router change listener of the store, each
    change fanned out in a task of its own (the change never waits for the bus nor fails with it)."""

    interface = interfaces.L3_AGENT
    agents = "L3 agents"
    log = LOG

    def _default_context(self) -> RequestContext:
        return admin_context()

    def routers_changed(self, ctx: RequestContext | None, router_ids: list[str]) -> None:
        router_ids = list(router_ids)
        self._fanout(ctx, f"routers {router_ids} changed", "routers_updated", router_ids=router_ids)
