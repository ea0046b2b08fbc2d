"""The L2 agent protocol (Neutron's ML2 agent RPC, topic ``q-plugin``): agents report devices.

An L2 agent on each compute host watches its virtual switch. When a device
(a port's VIF) appears it asks ``get_device_details`` — the port goes BUILD
while the agent wires it — and then reports ``update_device_up``: the port
goes ACTIVE, which the network service's notifier turns into
``network-vif-plugged`` for the server. When a device disappears it reports
``update_device_down`` (ACTIVE -> DOWN: ``network-vif-unplugged``). Reports
from a host the port is not bound to are ignored, as ML2 does (a port that
moved on must not be set DOWN by its old host).

ACTIVE waits for every component the port needs (``nefos.network.provisioning``):
``update_device_up`` acknowledges ``L2``; the DHCP agent acknowledges ``DHCP``
with ``dhcp_ready_on_ports`` once dnsmasq re-read a hosts file holding the
ports' entries. ``update_device_down`` blocks the port on ``L2`` again.

The other direction (Neutron's ``DhcpAgentNotifyAPI``, topic ``dhcp_agent``): after a port,
subnet or network change commits, the network service fans out ``network_changed`` (the
network id and Neutron's event name, ``port_create_end`` ...) to every DHCP agent
(``DhcpAgentNotifier``), which syncs that network at once instead of at its next periodic
look (``nefos.network.agents.dhcp_agent``).

Each report is served under the agent's request context (it travels with the
bus message), so the agent's request id is on every log line of the hop, on
the port's outbox row and on the external event the notifier posts.

``PluginEndpoint`` runs in the network service; ``PluginAPI`` is the agent's
client. Everything travels over the bus, so an agent works in the compute
host's process whatever process the network service runs in.
"""

from __future__ import annotations

import contextlib
import logging

from nefos import exceptions
from nefos.bus import Endpoint, interfaces
from nefos.bus.versioning import RPCClient
from nefos.context import RequestContext, current_context
from nefos.network import provisioning
from nefos.network.agents.agent_sync import AgentNotifier

LOG = logging.getLogger(__name__)

TOPIC = "q-plugin"
DHCP_TOPIC = "dhcp_agent"  # Neutron's topics.DHCP_AGENT: the network service -> the DHCP agents


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


class PluginEndpoint(Endpoint):
    """The server side, served by the network service on ``q-plugin``."""

    rpc_interface = interfaces.PLUGIN

    def __init__(self, manager):
        self.manager = manager  # nefos.network.manager.NetworkManager

    async def get_device_details(self, ctx: RequestContext, device: str, agent_host: str,
                                 agent_id: str | None = None) -> dict:
        """What the agent needs to wire ``device``; marks the port BUILD (DOWN if administratively down)."""
        host = agent_host
        LOG.info("device %s details requested by agent %s on host %s", device, agent_id, host)

        def decide(row, _blocks) -> str | None:
            # the port as read in the transaction that sets its status (BUILD, or DOWN when
            # administratively down; unchanged when it already is)
            if (row.binding_host_id or "") != host:
                LOG.debug("device %s requested by agent %s is bound to %r, not %s",
                          device, agent_id, row.binding_host_id or "", host)
                return None
            return "BUILD" if row.admin_state_up else "DOWN"

        try:
            port = await self.manager._change_port_status(ctx.elevated(), device, decide)
        except exceptions.PortNotFound:
            LOG.debug("device %s requested by agent %s on %s not found", device, agent_id, host)
            return {"device": device}
        if port is None:
            return {"device": device}
        return {"device": device, "port_id": port["id"], "network_id": port["network_id"],
                "mac_address": port["mac_address"], "admin_state_up": port["admin_state_up"],
                "fixed_ips": port["fixed_ips"], "device_owner": port["device_owner"],
                "device_id": port["device_id"], "status": port["status"],
                "vif_type": port["binding:vif_type"], "vif_details": port["binding:vif_details"]}

    async def update_device_up(self, ctx: RequestContext, device: str, agent_host: str,
                               agent_id: str | None = None) -> dict:
        """The agent wired ``device``: L2 acknowledged; the port goes ACTIVE unless another
        component (DHCP) has not acknowledged it yet."""
        host = agent_host
        bound_elsewhere = False

        def accept(row) -> bool:  # in the acknowledging transaction
            nonlocal bound_elsewhere
            if (row.binding_host_id or "") != host:
                LOG.debug("device %s reported up on %s but bound to %r: ignored", device, host,
                          row.binding_host_id or "")
                bound_elsewhere = True
                return False
            LOG.info("device %s (server %s) reported up by agent %s on host %s", device,
                     row.device_id or "-", agent_id, host)
            return True

        row = await provisioning.device_up(self.manager, ctx, device, accept)
        if row is None:
            return {"device": device, "exists": False}
        if bound_elsewhere:
            return {"device": device, "exists": True, "bound_elsewhere": True}
        return {"device": device, "exists": True}

    async def update_device_down(self, ctx: RequestContext, device: str, agent_host: str,
                                 agent_id: str | None = None) -> dict:
        """``device`` is gone from the host: the port goes DOWN."""
        host = agent_host
        port = await self.manager.port_binding(device)
        if port is None:
            return {"device": device, "exists": False}
        if port["binding:host_id"] not in (host, ""):
            LOG.debug("device %s reported down on %s but bound to %r: ignored", device, host,
                      port["binding:host_id"])
            return {"device": device, "exists": True, "bound_elsewhere": True}
        LOG.info("device %s (server %s) reported down by agent %s on host %s", device,
                 port["device_id"] or "-", agent_id, host)
        async with self.manager.rt.db.transaction() as s:
            await provisioning.block(s, port["id"], provisioning.L2)  # up again only when reported up
        if port["status"] != "DOWN":
            await self.manager.update_port_status(ctx.elevated(), port["id"], "DOWN")
        return {"device": device, "exists": True}

    async def dhcp_ready_on_ports(self, ctx: RequestContext, port_ids: list[str], agent_host: str) -> list[str]:
        """The DHCP agent on ``agent_host`` serves these ports' entries (dnsmasq re-read them): DHCP
        acknowledged. Returns the ports that went ACTIVE now."""
        LOG.info("DHCP agent on %s: entries in place for %d port(s): %s", agent_host, len(port_ids),
                 ", ".join(port_ids))
        return await provisioning.complete(self.manager, ctx, list(port_ids), provisioning.DHCP)


class PluginAPI:
    """The agent's side: calls into the network service over the bus."""

    def __init__(self, bus, host: str, agent_id: str):
        self.bus = bus
        self.client = RPCClient(bus, interfaces.PLUGIN)
        self.host = host
        self.agent_id = agent_id

    async def _call(self, method: str, device: str) -> dict:
        # (``host`` would address the bus message: the agent's host travels as ``agent_host``)
        return await self.client.call(current_context.get() or _admin(), method, device=device,
                                      agent_host=self.host, agent_id=self.agent_id)

    async def get_device_details(self, device: str) -> dict:
        return await self._call("get_device_details", device)

    async def update_device_up(self, device: str) -> dict:
        return await self._call("update_device_up", device)

    async def update_device_down(self, device: str) -> dict:
        return await self._call("update_device_down", device)

    async def dhcp_ready_on_ports(self, port_ids: list[str]) -> list[str]:
        return await self.client.call(current_context.get() or _admin(), "dhcp_ready_on_ports",
                                      port_ids=list(port_ids), agent_host=self.host)


class DhcpAgentNotifier(AgentNotifier):
    """The network service's side of ``dhcp_agent``: a network change listener of the manager
    (``add_network_change_listener``), called after the change committed. Each change is fanned
    out in a task of its own, so the change never waits for the bus nor fails with it."""

    interface = interfaces.DHCP_AGENT
    agents = "DHCP agents"
    log = LOG

    def _default_context(self) -> RequestContext:
        return _admin()

    def network_changed(self, ctx: RequestContext | None, event: str, network_id: str) -> None:
        self._fanout(ctx, f"{event} on network {network_id}", "network_changed", network_id=network_id,
                     event=event)


class DhcpAgentEndpoint(Endpoint):
    """The DHCP agent's side of ``dhcp_agent``: ``agent.network_changed(network_id)`` queues that
    network for a sync at once (bursts coalesce there)."""

    rpc_interface = interfaces.DHCP_AGENT

    def __init__(self, agent):
        self.agent = agent  # nefos.network.agents.dhcp_agent.DhcpAgent

    async def network_changed(self, ctx: RequestContext, network_id: str, event: str | None = None) -> None:
        LOG.debug("%s: %s on network %s", self.agent.name, event or "change", network_id)
        self.agent.network_changed(network_id)
