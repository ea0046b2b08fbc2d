"""The security groups of a host's ports for its L2 agent (Neutron's ``SecurityGroupServerRpcCallback``,
reduced), served by the network service on ``q-securitygroup-plugin``: the agent's firewall
(``nefos.agents.firewall``) turns them into chains."""

from __future__ import annotations

import ipaddress

from sqlalchemy import select

from nefos.bus import Endpoint, interfaces
from nefos.context import RequestContext
from nefos.db.models import IPAllocation, Port, PortSecurityGroup, SecurityGroupRule


class SecurityGroupCallbacks(Endpoint):
    """What an L2 agent asks of security groups."""

    rpc_interface = interfaces.SECURITY_GROUP_PLUGIN

    def __init__(self, db):
        self.db = db

    async def security_group_info_for_host(self, ctx: RequestContext, agent_host: str) -> list[dict]:
        """The filters (port id, tap, MAC, fixed IPs, rules with remote groups as addresses) of the
        protected instance ports bound to ``agent_host``."""
        return await load_filters(self.db, agent_host)


async def load_filters(db, host: str) -> list[dict]:
    """The protected compute ports bound to ``host``, with their rules (remote groups as addresses)."""
    async with db.reader() as s:
        ports = (await s.execute(select(Port).where(
            Port.binding_host_id == host, Port.device_owner.like("compute:%"),
            Port.port_security_enabled.is_(True)))).scalars().all()
        if not ports:
            return []
        ids = [p.id for p in ports]
        ips: dict[str, list[str]] = {}
        for port_id, ip in (await s.execute(select(IPAllocation.port_id, IPAllocation.ip_address).where(
                IPAllocation.port_id.in_(ids)))).all():
            ips.setdefault(port_id, []).append(ip)
        groups: dict[str, list[str]] = {}
        for port_id, sg in (await s.execute(select(PortSecurityGroup.port_id, PortSecurityGroup.security_group_id)
                                            .where(PortSecurityGroup.port_id.in_(ids)))).all():
            groups.setdefault(port_id, []).append(sg)
        all_groups = {g for gs in groups.values() for g in gs}
        rules: dict[str, list[SecurityGroupRule]] = {}
        if all_groups:
            for rule in (await s.execute(select(SecurityGroupRule).where(
                    SecurityGroupRule.security_group_id.in_(all_groups)))).scalars():
                rules.setdefault(rule.security_group_id, []).append(rule)
        remote_ids = {r.remote_group_id for rs in rules.values() for r in rs if r.remote_group_id}
        members: dict[str, set[str]] = {}
        if remote_ids:
            for sg, ip in (await s.execute(select(PortSecurityGroup.security_group_id, IPAllocation.ip_address)
                                           .join(IPAllocation, IPAllocation.port_id == PortSecurityGroup.port_id)
                                           .where(PortSecurityGroup.security_group_id.in_(remote_ids)))).all():
                members.setdefault(sg, set()).add(ip)
    out = []
    for p in sorted(ports, key=lambda p: p.id):
        pf = {"port_id": p.id, "tap": "tap" + p.id[:11], "mac": p.mac_address.lower(),
              "ips": sorted(ips.get(p.id, [])), "rules": []}
        for sg in sorted(groups.get(p.id, [])):
            for r in sorted(rules.get(sg, []), key=lambda r: r.id):
                version = 6 if r.ethertype == "IPv6" else 4
                if r.remote_group_id:
                    remotes = sorted(ip for ip in members.get(r.remote_group_id, ())
                                     if ipaddress.ip_address(ip).version == version)
                    if not remotes:
                        continue
                else:
                    # The prefix is kept as the user gave it (host bits too): the network it names.
                    remotes = ([str(ipaddress.ip_network(r.remote_ip_prefix, strict=False))]
                               if r.remote_ip_prefix else [None])
                pf["rules"].append({"direction": r.direction, "protocol": r.protocol, "version": version,
                                 "min": r.port_range_min, "max": r.port_range_max, "remotes": remotes})
        out.append(pf)
    return out
