"""The network service process: the network manager on the bus, the agents' callbacks and the
Networking API, each calling the service that owns the operation."""

from __future__ import annotations

from nefos.control.network.manager import NetworkManager
from nefos.control.network.rest import create_app
from nefos.service import Component, Service


class NetworkComponent(Component):
    name = "network"

    def __init__(self, rt):
        self.rt = rt
        self.manager = NetworkManager(rt)
        # Port changes -> Compute API external events (outbox + sender); the L2 agents' RPC.
        from nefos.control.network.agent_rpc import AgentStateCallbacks, DhcpAgentNotifier, L2AgentCallbacks, MetadataCallbacks
        from nefos.control.network.dhcp_rpc import DhcpCallbacks
        from nefos.control.network.notifier import Notifier
        from nefos.control.network.securitygroups_rpc import SecurityGroupCallbacks
        store, ports = self.manager.store, self.manager.ports
        self.notifier = Notifier(rt)
        store.add_port_change_hook(self.notifier.on_port_change)
        # The agents' surfaces (nefos.clients.network_agents names their topics): all an agent can ask.
        from nefos.clients import network_agents as topics
        self.plugin_endpoint = L2AgentCallbacks(rt, ports)
        # Ports bound, moved, deleted; VTEPs appearing -> the L2 agents (L2 population, q-agent-notifier).
        from nefos.control.network.l2pop import L2popNotifier
        self.l2pop_notifier = L2popNotifier(rt.bus)
        store.add_network_change_listener(self.l2pop_notifier.network_changed)
        store.add_port_change_hook(self.l2pop_notifier.on_port_change)  # admin_state_up -> the agents
        self.agent_surfaces = {topics.PLUGIN_TOPIC: self.plugin_endpoint,
                               topics.SECURITY_GROUP_TOPIC: SecurityGroupCallbacks(rt.db),
                               topics.DHCP_PLUGIN_TOPIC: DhcpCallbacks(rt.db, ports),
                               topics.METADATA_TOPIC: MetadataCallbacks(rt.db),
                               topics.REPORTS_TOPIC: AgentStateCallbacks(rt.db, self.l2pop_notifier.vtep_changed)}
        # Port / subnet / network changes -> the DHCP agents (topic dhcp_agent), after the commit.
        self.dhcp_notifier = DhcpAgentNotifier(rt.bus)
        store.add_network_change_listener(self.dhcp_notifier.network_changed)
        # Router / floating IP changes -> the L3 agents (topic l3_agent); their sync on q-l3-plugin.
        from nefos.control.network.l3_rpc import L3AgentNotifier, L3PluginEndpoint
        self.l3_notifier = L3AgentNotifier(rt.bus)
        store.add_router_change_listener(self.l3_notifier.routers_changed)
        self.l3_endpoint = L3PluginEndpoint(self.manager.routers)
        self.agent_surfaces[topics.L3_PLUGIN_TOPIC] = self.l3_endpoint
        self.app = create_app(rt, self.manager)
        self.port = rt.cfg.network_api_port
        self.service: Service | None = None

    async def start(self) -> None:
        self.service = Service(self.rt, "nefos-network", "network", self.rt.cfg.host, endpoint=self.manager)
        await self.service.start()
        for topic, surface in self.agent_surfaces.items():
            await self.rt.bus.serve(topic, surface, host=self.rt.cfg.host)
        self.notifier.start()

    async def stop(self) -> None:
        for surface in self.agent_surfaces.values():
            await self.rt.bus.unserve(surface)
        await self.l3_notifier.stop()
        await self.notifier.stop()
        await self.dhcp_notifier.stop()
        await self.l2pop_notifier.stop()
        if self.service is not None:
            await self.service.stop()


def component(rt) -> Component:
    return NetworkComponent(rt)
