"""What an agent says to the network service, and hears from it: the agents' only way to the cloud.

An agent holds no database credentials (Neutron's agents neither): everything it needs comes over
the bus from the network service's agent-facing surfaces (``nefos.control.network.agent_rpc``,
``dhcp_rpc``, ``securitygroups_rpc``, ``l3_rpc``, ``l2pop``), and its state goes back the same way.
Each surface has a topic of its own; each client here is a plain class of named calls.

Agent -> service (call):

* ``q-plugin`` (``L2PluginAPI``, Neutron's ML2 ``RpcCallbacks``): device details, device up/down,
  the ports bound to the agent's host, which devices belong to a port, the cloud's networks;
* ``q-securitygroup-plugin`` (``SecurityGroupPluginAPI``): the filters of the ports bound to a host;
* ``q-dhcp-plugin`` (``DhcpPluginAPI``, Neutron's ``DhcpRpcCallback``): the networks with DHCP and
  their ports, the agent's DHCP port, DHCP ready on ports;
* ``q-metadata`` (``MetadataPluginAPI``): the instance port at an address, for the metadata proxy;
* ``q-reports-plugin`` (``StateReportAPI``, Neutron's ``report_state``): the agent's heartbeat;
* ``q-l3-plugin`` (``L3PluginAPI``): the routers' configuration.

Service -> agents (fanout): ``dhcp_agent`` (``network_changed``), ``l3_agent``
(``routers_updated``), ``q-agent-notifier`` (L2 population: ``fdb_changed``; a port's
administrative state: ``port_update``).
"""

from __future__ import annotations

import contextlib

from nefos.bus import interfaces
from nefos.bus.base import Endpoint
from nefos.bus.versioning import RPCClient, RPCInterface
from nefos.context import RequestContext, admin_context, current_context

PLUGIN_TOPIC = "q-plugin"
SECURITY_GROUP_TOPIC = "q-securitygroup-plugin"
DHCP_PLUGIN_TOPIC = "q-dhcp-plugin"
METADATA_TOPIC = "q-metadata"
REPORTS_TOPIC = "q-reports-plugin"
L3_PLUGIN_TOPIC = "q-l3-plugin"
DHCP_AGENT_TOPIC = "dhcp_agent"  # Neutron's topics.DHCP_AGENT
L3_AGENT_TOPIC = "l3_agent"
L2_AGENT_TOPIC = "q-agent-notifier"  # Neutron's topics.AGENT: the L2 agents

DHCP_AGENT = "DHCP agent"  # the agent types, as reported (provisioning waits for the DHCP agent)
L2_AGENT = "Linux bridge agent"
TAP_PREFIX = "tap"  # a port's device: tap + the port id's first 11 characters


def _admin() -> RequestContext:
    return RequestContext(project_id=None, user_id=None, roles=["admin", "service"], is_admin=True)


@contextlib.contextmanager
def report_context():
    """An agent's report (device up, DHCP ready, ...) runs under one new request context: every
    call it makes and every log line of it, here and in the services it reaches, carry its id."""
    ctx = _admin()
    token = current_context.set(ctx)
    try:
        yield ctx
    finally:
        current_context.reset(token)


class _Client:
    interface: RPCInterface  # the surface's topic and methods (nefos.bus.interfaces)

    def __init__(self, bus, host: str):
        self.bus = bus
        self.host = host
        self.client = RPCClient(bus, self.interface)

    @property
    def topic(self) -> str:
        return self.interface.topic

    async def _call(self, method: str, **kwargs):
        # (``host`` would address the bus message: the agent's host travels as ``agent_host``)
        return await self.client.call(current_context.get() or _admin(), method, agent_host=self.host, **kwargs)


class L2PluginAPI(_Client):
    """The L2 agent's calls on ``q-plugin``."""

    interface = interfaces.PLUGIN

    def __init__(self, bus, host: str, agent_id: str):
        super().__init__(bus, host)
        self.agent_id = agent_id

    async def get_device_details(self, device: str) -> dict:
        """What wiring ``device`` (a port id, or its tap ``tap<port id[:11]>``) needs; the port goes
        BUILD. Without ``port_id`` in the answer: no port bound to this host."""
        return await self._call("get_device_details", device=device, agent_id=self.agent_id)

    async def update_device_up(self, device: str) -> dict:
        """``device`` is wired: the port's L2 is done (ACTIVE once nothing else blocks it)."""
        return await self._call("update_device_up", device=device, agent_id=self.agent_id)

    async def update_device_down(self, device: str) -> dict:
        """``device`` is gone from this host: the port goes DOWN."""
        return await self._call("update_device_down", device=device, agent_id=self.agent_id)

    async def get_devices_on_host(self) -> list[str]:
        """The instance ports bound to this host that are ACTIVE or BUILD (their taps should be here)."""
        return await self._call("get_devices_on_host")

    async def get_devices_admin_state(self) -> dict[str, bool]:
        """port id -> ``admin_state_up`` of the instance ports bound to this host."""
        return await self._call("get_devices_admin_state")

    async def get_known_devices(self, devices: list[str]) -> list[str]:
        """Which of these taps belong to a port that exists (any host)."""
        return await self._call("get_known_devices", devices=sorted(devices))

    async def get_network_ids(self) -> list[str]:
        """Every network of the cloud (whose bridges are this cloud's)."""
        return await self._call("get_network_ids")

    async def get_fdb_entries(self, network_ids: list[str] | None = None) -> dict:
        """L2 population for this host: per VXLAN network its VNI, MTU and the other hosts' VTEPs
        with their ports' MACs and IPs (None: every network)."""
        return await self._call("get_fdb_entries", network_ids=None if network_ids is None else sorted(network_ids))


PluginAPI = L2PluginAPI  # (the fake L2 agent's name for it)


class SecurityGroupPluginAPI(_Client):
    """The L2 agent's call on ``q-securitygroup-plugin``."""

    interface = interfaces.SECURITY_GROUP_PLUGIN

    async def security_group_info_for_host(self) -> list[dict]:
        """The filters (``firewall.PortFilter`` fields) of the protected ports bound to this host."""
        return await self._call("security_group_info_for_host")


class DhcpPluginAPI(_Client):
    """The DHCP agent's calls on ``q-dhcp-plugin``."""

    interface = interfaces.DHCP_PLUGIN

    async def get_active_networks_info(self, network_ids: list[str] | None = None) -> list[dict]:
        """The networks (of ``network_ids``; None: all) needing DHCP: subnets, ports, blocked ports."""
        return await self._call("get_active_networks_info",
                                network_ids=None if network_ids is None else sorted(network_ids))

    async def get_dhcp_port(self, network_id: str) -> dict:
        """This agent's DHCP port on ``network_id``, created when missing."""
        return await self._call("get_dhcp_port", network_id=network_id)

    async def release_dhcp_port(self, network_id: str) -> None:
        """This agent's DHCP port on ``network_id`` is no longer needed: delete it."""
        return await self._call("release_dhcp_port", network_id=network_id)

    async def dhcp_ready_on_ports(self, port_ids: list[str]) -> list[str]:
        """dnsmasq serves these ports' entries: DHCP is done for them."""
        return await self._call("dhcp_ready_on_ports", port_ids=list(port_ids))


class MetadataPluginAPI(_Client):
    """The metadata proxy's call on ``q-metadata``."""

    interface = interfaces.METADATA_PLUGIN

    async def get_instance_port(self, network_id: str, ip_address: str) -> list[list[str]]:
        """(instance id, project id) of each instance port with ``ip_address`` on ``network_id``."""
        return await self._call("get_instance_port", network_id=network_id, ip_address=ip_address)


class StateReportAPI(_Client):
    """Every agent's call on ``q-reports-plugin``."""

    interface = interfaces.REPORTS_PLUGIN

    async def report_state(self, agent_type: str, started: bool = False, tunneling_ip: str | None = None) -> None:
        """This agent is alive (``started``: it just started); an L2 agent's VXLAN underlay address
        in ``tunneling_ip``."""
        kwargs = {"tunneling_ip": tunneling_ip} if tunneling_ip is not None else {}
        return await self._call("report_state", agent_type=agent_type, started=started, **kwargs)


class L3PluginAPI(_Client):
    """The L3 agent's call on ``q-l3-plugin``."""

    interface = interfaces.L3_PLUGIN

    async def sync_routers(self, router_ids: list[str] | None = None) -> list[dict]:
        """The L3 configuration of ``router_ids`` (None: every router); a router left out is gone."""
        return await self.client.call(admin_context(), "sync_routers", agent_host=self.host,
                                      router_ids=None if router_ids is None else sorted(router_ids))


# What the agents serve ---------------------------------------------------------------------------
class DhcpAgentEndpoint(Endpoint):
    """The DHCP agent's side of ``dhcp_agent``: the network is queued for a sync at once (bursts
    coalesce there)."""

    rpc_interface = interfaces.DHCP_AGENT

    def __init__(self, agent):
        self.agent = agent  # nefos.agents.dhcp_agent.DhcpAgent

    async def network_changed(self, ctx: RequestContext, network_id: str, event: str | None = None) -> None:
        """``network_id`` changed (Neutron's event name in ``event``)."""
        self.agent.network_changed(network_id)


class L3AgentEndpoint(Endpoint):
    """The L3 agent's side of ``l3_agent``: the routers notified are synced at once."""

    rpc_interface = interfaces.L3_AGENT

    def __init__(self, agent):
        self.agent = agent  # nefos.agents.l3_agent.L3Agent

    async def routers_updated(self, ctx: RequestContext, router_ids: list[str]) -> None:
        """These routers (or their floating IPs) changed."""
        self.agent.routers_changed(router_ids)


class L2AgentEndpoint(Endpoint):
    """The L2 agent's side of ``q-agent-notifier``: L2 population, and ports whose administrative
    state changed (Neutron's ``port_update``)."""

    rpc_interface = interfaces.L2_AGENT

    def __init__(self, agent):
        self.agent = agent  # nefos.agents.l2_agent.L2Agent

    async def fdb_changed(self, ctx: RequestContext, network_ids: list[str]) -> None:
        """Ports of these networks were bound, unbound or moved: their forwarding entries changed."""
        self.agent.fdb_changed(network_ids)

    async def port_update(self, ctx: RequestContext, port_id: str) -> None:
        """``port_id``'s ``admin_state_up`` changed: the agent whose host has its device takes the
        device down (and the port DOWN) or brings it back up (the port ACTIVE)."""
        self.agent.port_updated(port_id)
