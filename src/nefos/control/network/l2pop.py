"""L2 population (Neutron's l2pop mechanism driver, reduced): what each host's L2 agent needs to
carry its VXLAN networks to the other hosts without learning or multicast.

Each L2 agent with an underlay address (``local_ip``) reports it (``report_state``, recorded as
the agent's ``tunneling_ip``). For a host, ``fdb_entries`` gives each VXLAN network that has a port
bound to that host: its VNI and MTU, and per *other* host having ports on it (its VTEP, the
tunneling IP of its L2 agent) those ports' MACs and fixed IPs. The agent floods broadcast and
unknown traffic to exactly those VTEPs (one all-zero FDB entry each: a host with no port on the
network gets none of its traffic), sends each known MAC to its host's VTEP, and answers ARP for
the known addresses itself (the VXLAN device's ARP proxy).

When ports are created, bound, unbound, moved or deleted, the network service fans out
``fdb_changed`` (the networks) on ``q-agent-notifier`` after the change committed
(``L2popNotifier``, a network change listener of the manager); a new VTEP (an agent that started,
or whose address changed) is fanned out for every network. Agents also resync every few seconds,
the backstop for a notification lost.

The same notifier tells the L2 agents of a port whose ``admin_state_up`` changed (``port_update``,
Neutron's ``AgentNotifierApi.port_update``), once the change committed: the agent of the port's
host takes the device down (the port DOWN) or brings it back (ACTIVE).
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from nefos.bus import interfaces
from nefos.context import RequestContext, admin_context
from nefos.db.models import IPAllocation, Network, NetworkAgent, Port
from nefos.db.session import after_commit
from nefos.control.network.agent_notifier import AgentNotifier
from nefos.clients.network_agents import L2_AGENT, L2_AGENT_TOPIC  # noqa: F401
from nefos.control.network.segments import VXLAN

LOG = logging.getLogger(__name__)


async def vteps(s) -> dict[str, str]:
    """host -> the tunneling IP its L2 agent reported."""
    return {host: ip for host, ip in (await s.execute(select(NetworkAgent.host, NetworkAgent.tunneling_ip).where(
        NetworkAgent.agent_type == L2_AGENT, NetworkAgent.tunneling_ip.is_not(None)))).all() if ip}


async def fdb_entries(rt, host: str, network_ids: list[str] | None = None) -> dict:
    """{network id: {"segmentation_id", "mtu", "vteps": {vtep ip: [[mac, ip or None], ...]}}} of the
    VXLAN networks with a port bound to ``host`` (of ``network_ids``; None: all)."""
    async with rt.db.reader() as s:
        q = (select(Network.id, Network.segmentation_id, Network.mtu).join(Port, Port.network_id == Network.id)
             .where(Port.binding_host_id == host, Network.network_type == VXLAN,
                    Network.segmentation_id.is_not(None)).distinct())
        if network_ids is not None:
            q = q.where(Network.id.in_(list(network_ids)))
        nets = {nid: {"segmentation_id": vni, "mtu": mtu, "vteps": {}} for nid, vni, mtu in (await s.execute(q)).all()}
        if not nets:
            return {}
        tunnels = await vteps(s)
        rows = (await s.execute(select(Port.network_id, Port.binding_host_id, Port.mac_address,
                                       IPAllocation.ip_address)
                                .outerjoin(IPAllocation, IPAllocation.port_id == Port.id)
                                .where(Port.network_id.in_(list(nets)), Port.binding_host_id != "",
                                       Port.binding_host_id != host))).all()
    for network_id, port_host, mac, ip in rows:
        vtep = tunnels.get(port_host)
        if vtep is None or vtep == tunnels.get(host):
            continue  # a host without tunnels (or this host under another name) cannot be reached
        entries = nets[network_id]["vteps"].setdefault(vtep, [])
        entry = [mac.lower(), ip]
        if entry not in entries:
            entries.append(entry)
    for net in nets.values():
        for entries in net["vteps"].values():
            entries.sort(key=lambda e: (e[0], e[1] or ""))
    return nets


class L2popNotifier(AgentNotifier):
    """The network service's side of ``q-agent-notifier``: a network change listener of the manager
    (ports created, bound, moved, deleted), the state reports' listener (a VTEP appeared) and a
    port change hook (a bound port's ``admin_state_up`` changed)."""

    interface = interfaces.L2_AGENT
    agents = "L2 agents"
    log = LOG

    def _default_context(self) -> RequestContext:
        return admin_context()

    def network_changed(self, ctx: RequestContext | None, event: str, network_id: str) -> None:
        if event.startswith("port_") or event.startswith("network_"):
            self._fanout(ctx, f"{event} on network {network_id}", "fdb_changed", network_ids=[network_id])

    def vtep_changed(self, ctx: RequestContext | None, host: str) -> None:
        self._fanout(ctx, f"VTEP of {host}", "fdb_changed", network_ids=None)

    async def on_port_change(self, s, ctx: RequestContext | None, before: dict | None, after: dict | None) -> None:
        """A port change hook (inside the port's transaction): a bound port taken down or brought
        back up is told to the L2 agents once the change committed."""
        if (before is None or after is None or not after.get("binding:host_id")
                or bool(before.get("admin_state_up")) == bool(after.get("admin_state_up"))):
            return
        port_id = after["id"]
        after_commit(s, lambda: self._fanout(ctx, f"admin_state_up of port {port_id}", "port_update",
                                             port_id=port_id))
