"""What a DHCP agent asks of the network service (Neutron's ``DhcpRpcCallback``, reduced), served on
``q-dhcp-plugin``: the networks that need DHCP with their subnets and ports, the agent's own DHCP
port on each, and DHCP done for ports (a provisioning block lifted)."""

from __future__ import annotations

import logging

from sqlalchemy import select

from nefos.bus import Endpoint, interfaces
from nefos.context import RequestContext
from nefos.db.models import IPAllocation, Network, Port, PortProvisioning, Subnet
from nefos.control.network import provisioning

LOG = logging.getLogger(__name__)

DHCP_OWNER = "network:dhcp"


def dhcp_device_id(host: str, network_id: str) -> str:
    return f"dhcp-{host}-{network_id}"


class DhcpCallbacks(Endpoint):
    """A DHCP agent's questions and reports."""

    rpc_interface = interfaces.DHCP_PLUGIN

    def __init__(self, db, ports):
        self.db = db
        self.ports = ports  # nefos.control.network.ports.Ports

    async def get_active_networks_info(self, ctx: RequestContext, agent_host: str,
                                       network_ids: list[str] | None = None) -> list[dict]:
        """The administratively up networks (of ``network_ids``; None: all) with a DHCP-enabled IPv4
        subnet: ``network_id``, ``mtu``, ``subnets`` (id, cidr, gateway_ip, dns_nameservers),
        ``ports`` (id, mac_address, device_owner, fixed_ips: subnet_id, ip_address) and ``blocked``
        (the ports waiting for DHCP)."""
        async with self.db.reader() as s:
            q = select(Subnet, Network.mtu).join(Network, Network.id == Subnet.network_id).where(
                Subnet.enable_dhcp.is_(True), Subnet.ip_version == 4, Network.admin_state_up.is_(True))
            if network_ids is not None:
                q = q.where(Subnet.network_id.in_(list(network_ids)))
            wanted: dict[str, dict] = {}
            for sn, mtu in (await s.execute(q)).all():
                net = wanted.setdefault(sn.network_id, {"network_id": sn.network_id, "mtu": mtu, "subnets": [],
                                                        "ports": {}, "blocked": []})
                net["subnets"].append({"id": sn.id, "cidr": sn.cidr, "gateway_ip": sn.gateway_ip,
                                       "dns_nameservers": list(sn.dns_nameservers or [])})
            if not wanted:
                return []
            blocked = (await s.execute(select(PortProvisioning.port_id, Port.network_id).join(
                Port, Port.id == PortProvisioning.port_id).where(
                Port.network_id.in_(list(wanted)), PortProvisioning.component == provisioning.DHCP,
                PortProvisioning.satisfied.is_(False)))).all()
            rows = (await s.execute(select(Port.id, Port.network_id, Port.mac_address, Port.device_owner,
                                           IPAllocation.subnet_id, IPAllocation.ip_address)
                                    .join(IPAllocation, IPAllocation.port_id == Port.id)
                                    .where(Port.network_id.in_(list(wanted))))).all()
        for port_id, network_id in blocked:
            wanted[network_id]["blocked"].append(port_id)
        for port_id, network_id, mac, owner, subnet_id, ip in rows:
            port = wanted[network_id]["ports"].setdefault(port_id, {
                "id": port_id, "mac_address": mac, "device_owner": owner, "fixed_ips": []})
            port["fixed_ips"].append({"subnet_id": subnet_id, "ip_address": ip})
        for net in wanted.values():
            net["ports"] = sorted(net["ports"].values(), key=lambda p: p["id"])
            net["blocked"].sort()
        return sorted(wanted.values(), key=lambda n: n["network_id"])

    async def get_network_info(self, ctx: RequestContext, agent_host: str, network_id: str) -> dict | None:
        """``get_active_networks_info`` of one network (None: it needs no DHCP)."""
        found = await self.get_active_networks_info(ctx, agent_host, [network_id])
        return found[0] if found else None

    async def get_dhcp_port(self, ctx: RequestContext, agent_host: str, network_id: str) -> dict:
        """The DHCP port of ``agent_host`` on ``network_id`` (bound to that host, owned by the
        network's project), created when missing."""
        device_id = dhcp_device_id(agent_host, network_id)
        admin = ctx.elevated()
        # by its owner too: any project may name the agent's device_id, only an admin gives network:dhcp
        found = await self.ports.list_ports(admin, filters={"network_id": [network_id], "device_id": [device_id],
                                                            "device_owner": [DHCP_OWNER]})
        if found:
            return found[0]
        async with self.db.reader() as s:
            project = (await s.execute(select(Network.project_id).where(
                Network.id == network_id))).scalar_one_or_none()
        body = {"network_id": network_id, "device_owner": DHCP_OWNER, "device_id": device_id,
                "name": f"dhcp-{agent_host}", "binding:host_id": agent_host}
        if project:
            body["project_id"] = project
        port = await self.ports.create_port(admin, body)
        LOG.info("DHCP port %s of %s on network %s (%s)", port["id"], agent_host, network_id,
                 ", ".join(ip["ip_address"] for ip in port.get("fixed_ips") or []))
        return port

    async def release_dhcp_port(self, ctx: RequestContext, agent_host: str, network_id: str) -> None:
        """``agent_host`` no longer serves ``network_id``: its DHCP port there goes."""
        admin = ctx.elevated()
        for port in await self.ports.list_ports(admin, filters={
                "network_id": [network_id], "device_id": [dhcp_device_id(agent_host, network_id)],
                "device_owner": [DHCP_OWNER]}):
            await self.ports.delete_port(admin, port["id"])

    async def dhcp_ready_on_ports(self, ctx: RequestContext, port_ids: list[str], agent_host: str) -> list[str]:
        """The DHCP agent on ``agent_host`` serves these ports' entries (dnsmasq re-read them): DHCP
        acknowledged. Returns the ports that went ACTIVE now."""
        LOG.info("DHCP agent on %s: entries in place for %d port(s): %s", agent_host, len(port_ids),
                 ", ".join(port_ids))
        return await provisioning.complete(self.ports, ctx, list(port_ids), provisioning.DHCP)
