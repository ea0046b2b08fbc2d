"""The network service process: the network manager on the bus and the Networking API."""

from __future__ import annotations

from nefos.network.manager import NetworkManager
from nefos.network.rest import create_app
from nefos.service import Component, Service


class NetworkComponent(Component):
    name = "network"

    def __init__(self, rt):
        self.rt = rt
        self.manager = NetworkManager(rt)
        # Port changes -> Compute API external events (outbox + sender); the L2 agents' RPC.
        from nefos.network.agent_rpc import DhcpAgentNotifier, PluginEndpoint
        from nefos.network.notifier import Notifier
        self.notifier = Notifier(rt)
        self.manager.add_port_change_hook(self.notifier.on_port_change)
        self.plugin_endpoint = PluginEndpoint(self.manager)
        # Port / subnet / network changes -> the DHCP agents (topic dhcp_agent), after the commit.
        self.dhcp_notifier = DhcpAgentNotifier(rt.bus)
        self.manager.add_network_change_listener(self.dhcp_notifier.network_changed)
        # Router / floating IP changes -> the L3 agents (topic l3_agent); their sync on q-l3-plugin.
        from nefos.network.l3_rpc import L3AgentNotifier, L3PluginEndpoint
        self.l3_notifier = L3AgentNotifier(rt.bus)
        self.manager.add_router_change_listener(self.l3_notifier.routers_changed)
        self.l3_endpoint = L3PluginEndpoint(self.manager)
        self.app = create_app(rt, self.manager)
        self.port = rt.cfg.network_api_port
        self.service: Service | None = None

    async def start(self) -> None:
        self.service = Service(self.rt, "nefos-network", "network", self.rt.cfg.host, endpoint=self.manager)
        await self.service.start()
        from nefos.network.agent_rpc import TOPIC
        await self.rt.bus.serve(TOPIC, self.plugin_endpoint, host=self.rt.cfg.host)
        from nefos.network.l3_rpc import PLUGIN_TOPIC
        await self.rt.bus.serve(PLUGIN_TOPIC, self.l3_endpoint, host=self.rt.cfg.host)
        self.notifier.start()

    async def stop(self) -> None:
        await self.rt.bus.unserve(self.plugin_endpoint)
        await self.rt.bus.unserve(self.l3_endpoint)
        await self.l3_notifier.stop()
        await self.notifier.stop()
        await self.dhcp_notifier.stop()
        if self.service is not None:
            await self.service.stop()


def component(rt) -> Component:
    return NetworkComponent(rt)
