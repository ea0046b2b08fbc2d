"""The L2 agent protocol (Neutron's ML2 agent RPC, topic ``q-plugin``): agents report devices.

An L2 agent on each compute host watches its virtual switch. When a device
(a port's VIF) appears it asks ``get_device_details`` — the port goes BUILD
while the agent wires it — and then reports ``update_device_up``: the port
goes ACTIVE, which the network service's notifier turns into
``network-vif-plugged`` for the server. When a device disappears it reports
``update_device_down`` (ACTIVE -> DOWN: ``network-vif-unplugged``). Reports
from a host the port is not bound to are ignored, as ML2 does (a port that
moved on must not be set DOWN by its old host).

ACTIVE waits for every component the port needs (``nefos.control.network.provisioning``):
``update_device_up`` acknowledges ``L2``; the DHCP agent acknowledges ``DHCP``
with ``dhcp_ready_on_ports`` (``nefos.control.network.dhcp_rpc``) once dnsmasq re-read a hosts file holding the
ports' entries. ``update_device_down`` blocks the port on ``L2`` again.

The other direction (Neutron's ``DhcpAgentNotifyAPI``, topic ``dhcp_agent``): after a port,
subnet or network change commits, the network service fans out ``network_changed`` (the
network id and Neutron's event name, ``port_create_end`` ...) to every DHCP agent
(``DhcpAgentNotifier``), which syncs that network at once instead of at its next periodic
look (``nefos.agents.dhcp_agent``).

Each report is served under the agent's request context (it travels with the
bus message), so the agent's request id is on every log line of the hop, on
the port's outbox row and on the external event the notifier posts.

``L2AgentCallbacks`` runs in the network service; ``nefos.clients.network_agents.L2PluginAPI`` is
the agent's client. Everything travels over the bus, so an agent works in the compute host's
process whatever process the network service runs in, with no database of its own. The same goes
for the metadata proxy's question (``MetadataCallbacks``, topic ``q-metadata``) and every agent's
heartbeat (``AgentStateCallbacks``, topic ``q-reports-plugin``, Neutron's ``report_state``).
These are the agents' surfaces, apart from the API's services (as Neutron keeps its
plugin API and its agent RPC callbacks apart).
"""

from __future__ import annotations

import ipaddress
import logging

from sqlalchemy import or_, select, update

from nefos import exceptions
from nefos.bus import Endpoint, interfaces
from nefos.context import RequestContext
from nefos.db.models import IPAllocation, Network, NetworkAgent, Port
from nefos.control.network import provisioning
from nefos.control.network.agent_notifier import AgentNotifier
from nefos.clients.network_agents import (  # noqa: F401  (the topics, for the service and tests)
    DHCP_AGENT_TOPIC as DHCP_TOPIC, L2_AGENT, METADATA_TOPIC, PLUGIN_TOPIC as TOPIC, REPORTS_TOPIC, TAP_PREFIX,
    _admin, report_context)

LOG = logging.getLogger(__name__)

AGENT_TYPES = (provisioning.DHCP_AGENT, L2_AGENT)  # the agents whose state is recorded


class L2AgentCallbacks(Endpoint):
    """What an L2 agent asks and reports, served by the network service on ``q-plugin``."""

    rpc_interface = interfaces.PLUGIN

    def __init__(self, rt, ports):
        self.rt = rt
        self.ports = ports  # nefos.control.network.ports.Ports

    async def dhcp_ready_on_ports(self, ctx: RequestContext, port_ids: list[str], agent_host: str) -> list[str]:
        """A 0.9.0 DHCP agent's report (q-plugin 1.0); today's DHCP agents say it on
        ``q-dhcp-plugin`` (``DhcpCallbacks.dhcp_ready_on_ports``)."""
        from nefos.control.network.dhcp_rpc import DhcpCallbacks
        return await DhcpCallbacks(self.rt.db, self.ports).dhcp_ready_on_ports(ctx, port_ids, agent_host)

    async def _port_id(self, device: str, host: str) -> str:
        """The port id of ``device``: a port id, or a tap name (``tap`` + the id's first 11
        characters) of a port bound to ``host`` (Neutron's agents name devices by their tap too)."""
        if not device.startswith(TAP_PREFIX):
            return device
        prefix = device[len(TAP_PREFIX):]
        async with self.rt.db.reader() as s:
            ids = (await s.execute(select(Port.id).where(Port.id.like(f"{prefix}%"),
                                                         Port.binding_host_id == host))).scalars().all()
        return ids[0] if len(ids) == 1 else device

    async def get_device_details(self, ctx: RequestContext, device: str, agent_host: str,
                                 agent_id: str | None = None) -> dict:
        """What the agent needs to wire ``device``; marks the port BUILD (DOWN if administratively down)."""
        host = agent_host
        device = await self._port_id(device, host)
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
            port = await self.ports.change_port_status(ctx.elevated(), device, decide)
        except exceptions.PortNotFound:
            LOG.debug("device %s requested by agent %s on %s not found", device, agent_id, host)
            return {"device": device}
        if port is None:
            return {"device": device}
        async with self.rt.db.reader() as s:
            segment = (await s.execute(select(Network.network_type, Network.segmentation_id, Network.mtu).where(
                Network.id == port["network_id"]))).first()
        network_type, vni, mtu = segment if segment is not None else ("local", None, None)
        return {"device": device, "port_id": port["id"], "network_id": port["network_id"],
                "network_type": network_type, "segmentation_id": vni, "mtu": mtu,
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

        row = await provisioning.device_up(self.ports, ctx, device, accept)
        if row is None:
            return {"device": device, "exists": False}
        if bound_elsewhere:
            return {"device": device, "exists": True, "bound_elsewhere": True}
        return {"device": device, "exists": True}

    async def update_device_down(self, ctx: RequestContext, device: str, agent_host: str,
                                 agent_id: str | None = None) -> dict:
        """``device`` is gone from the host: the port goes DOWN."""
        host = agent_host
        port = await self.ports.port_binding(device)
        if port is None:
            return {"device": device, "exists": False}
        if port["binding:host_id"] not in (host, ""):
            LOG.debug("device %s reported down on %s but bound to %r: ignored", device, host,
                      port["binding:host_id"])
            return {"device": device, "exists": True, "bound_elsewhere": True}
        LOG.info("device %s (server %s) reported down by agent %s on host %s", device,
                 port["device_id"] or "-", agent_id, host)
        async with self.rt.db.transaction() as s:
            await provisioning.block(s, port["id"], provisioning.L2)  # up again only when reported up
        if port["status"] != "DOWN":
            await self.ports.update_port_status(ctx.elevated(), port["id"], "DOWN")
        return {"device": device, "exists": True}

    async def get_devices_details_list(self, ctx: RequestContext, devices: list[str], agent_host: str,
                                       agent_id: str | None = None) -> list[dict]:
        """``get_device_details`` of each of ``devices``."""
        return [await self.get_device_details(ctx, d, agent_host, agent_id) for d in devices]

    async def get_devices_on_host(self, ctx: RequestContext, agent_host: str) -> list[str]:
        """The instance ports bound to ``agent_host`` that are ACTIVE or BUILD."""
        async with self.rt.db.reader() as s:
            return list((await s.execute(select(Port.id).where(
                Port.binding_host_id == agent_host, Port.status.in_(("ACTIVE", "BUILD")),
                Port.device_owner.like("compute:%")).order_by(Port.id))).scalars())

    async def get_devices_admin_state(self, ctx: RequestContext, agent_host: str) -> dict[str, bool]:
        """port id -> ``admin_state_up`` of the instance ports bound to ``agent_host``."""
        async with self.rt.db.reader() as s:
            return {pid: bool(up) for pid, up in (await s.execute(select(Port.id, Port.admin_state_up).where(
                Port.binding_host_id == agent_host, Port.device_owner.like("compute:%")))).all()}

    async def get_known_devices(self, ctx: RequestContext, devices: list[str], agent_host: str) -> list[str]:
        """Which of the taps ``devices`` belong to a port that exists (bound anywhere)."""
        taps = [d for d in devices if d.startswith(TAP_PREFIX) and len(d) > len(TAP_PREFIX)]
        if not taps:
            return []
        async with self.rt.db.reader() as s:
            ids = (await s.execute(select(Port.id).where(
                or_(*[Port.id.like(t[len(TAP_PREFIX):] + "%") for t in taps])))).scalars().all()
        return sorted({TAP_PREFIX + i[:11] for i in ids} & set(taps))

    async def get_network_ids(self, ctx: RequestContext, agent_host: str) -> list[str]:
        """Every network of the cloud."""
        async with self.rt.db.reader() as s:
            return list((await s.execute(select(Network.id).order_by(Network.id))).scalars())

    async def get_fdb_entries(self, ctx: RequestContext, agent_host: str,
                              network_ids: list[str] | None = None) -> dict:
        """L2 population for ``agent_host`` (``nefos.control.network.l2pop``)."""
        from nefos.control.network import l2pop
        return await l2pop.fdb_entries(self.rt, agent_host, network_ids)


PluginEndpoint = L2AgentCallbacks


class MetadataCallbacks(Endpoint):
    """The metadata proxy's question, served on ``q-metadata``."""

    rpc_interface = interfaces.METADATA_PLUGIN

    def __init__(self, db):
        self.db = db

    async def get_instance_port(self, ctx: RequestContext, network_id: str, ip_address: str,
                                agent_host: str) -> list[list[str]]:
        """(instance id, project id) of each instance port with ``ip_address`` on ``network_id``."""
        async with self.db.reader() as s:
            rows = (await s.execute(select(Port.device_id, Port.project_id).join(
                IPAllocation, IPAllocation.port_id == Port.id).where(
                Port.network_id == network_id, IPAllocation.ip_address == ip_address,
                Port.device_owner.like("compute:%"), Port.device_id != ""))).all()
        return sorted({(d, p or "") for d, p in rows})


class AgentStateCallbacks(Endpoint):
    """Every agent's heartbeat, served on ``q-reports-plugin`` (Neutron's ``report_state``)."""

    rpc_interface = interfaces.REPORTS_PLUGIN

    def __init__(self, db, on_vtep_changed=None):
        self.db = db
        self.on_vtep_changed = on_vtep_changed  # (ctx, host): an L2 agent's tunneling IP changed

    async def report_state(self, ctx: RequestContext, agent_type: str, agent_host: str,
                           started: bool = False, tunneling_ip: str | None = None) -> None:
        """``agent_type`` on ``agent_host`` is alive (``started``: it just started); an L2 agent
        also says its VXLAN underlay address (``tunneling_ip``, None: no tunnels)."""
        if agent_type not in AGENT_TYPES:
            raise exceptions.BadRequest(resource="agent", msg=f"unknown agent type {agent_type!r}")
        if tunneling_ip is not None:
            try:
                tunneling_ip = str(ipaddress.ip_address(tunneling_ip))
            except ValueError:
                raise exceptions.BadRequest(resource="agent", msg=f"invalid tunneling IP {tunneling_ip!r}")
        await provisioning.heartbeat(self.db, agent_type, agent_host, started=started)
        if agent_type != L2_AGENT:
            return
        async with self.db.transaction() as s:
            other = (NetworkAgent.tunneling_ip.is_not(None) if tunneling_ip is None else
                     or_(NetworkAgent.tunneling_ip.is_(None), NetworkAgent.tunneling_ip != tunneling_ip))
            changed = (await s.execute(update(NetworkAgent).where(
                NetworkAgent.agent_type == agent_type, NetworkAgent.host == agent_host, other)
                .values(tunneling_ip=tunneling_ip))).rowcount
        if changed and self.on_vtep_changed is not None:
            LOG.info("L2 agent on %s: VXLAN underlay address %s", agent_host, tunneling_ip or "none")
            self.on_vtep_changed(ctx, agent_host)


class DhcpAgentNotifier(AgentNotifier):
    """The network service's side of ``dhcp_agent``: a network change listener of the store
    (``NetworkStore.add_network_change_listener``), called after the change committed. Each change is fanned
    out in a task of its own, so the change never waits for the bus nor fails with it."""

    interface = interfaces.DHCP_AGENT
    agents = "DHCP agents"
    log = LOG

    def _default_context(self) -> RequestContext:
        return _admin()

    def network_changed(self, ctx: RequestContext | None, event: str, network_id: str) -> None:
        self._fanout(ctx, f"{event} on network {network_id}", "network_changed", network_id=network_id,
                     event=event)
