"""Ports (Neutron's), one service of the network manager.

``Ports`` serves the ports' part of the bus and of the Networking API, and what the agents'
callbacks and provisioning ask of a port (its status, its binding). It counts usage with
``NetworkQuotas``, gives a new port its project's default group (``SecurityGroups``), and marks
its changes in the ``NetworkStore`` transaction (the DHCP agents', the port change hooks'). An IP
address is unique per network by the ``ipallocations`` primary key (pick a free candidate, insert
it, and on a duplicate try the next one), a MAC is unique per network by a unique key.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import types
from typing import Any, Awaitable, Callable

from sqlalchemy import (and_, bindparam, case, delete, exists, func, insert, literal_column, null, or_, select, true,
                        union_all, update)

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import (
    FloatingIP, IPAllocation, Network, Port, PortProvisioning, PortSecurityGroup, Router, RouterPort,
    SecurityGroup, Subnet, utcnow,
)
from nefos.db import codepoint
from nefos.db.session import insert_ignoring_duplicate
from nefos.control.network import attributes as attrs
from nefos.control.network import ipam, list_query, provisioning, schemas
from nefos.control.network.common import (
    bulk as _bulk, chunks as _chunks, iso, new_id, not_owner as _not_owner, owned as _owned, project_for_create,
    visibility as _visibility, where_filters as _where_filters,
)
from nefos.control.network.network_rows import network_brief
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.security_groups import SecurityGroups
from nefos.control.network.store import NetworkStore

LOG = logging.getLogger(__name__)

ADMIN_ONLY_PORT_FIELDS = schemas.ADMIN_ONLY["port"]
ROUTER_INTERFACE_OWNER = "network:router_interface"
ROUTER_GATEWAY_OWNER = "network:router_gateway"
FLOATINGIP_OWNER = "network:floatingip"
NETWORK_OWNER_PREFIX = "network:"  # the owners of the network service's own ports: the admin's to give
PORT_FIELDS = schemas.fields("port")
IP_HINT_ATTEMPTS = 4
MAX_MAC_ATTEMPTS = 16

# Prebuilt Core statements of the port's hot paths (a server boot creates a port and changes its
# status twice); see ``networks.py``.
_N = Network.__table__
_S = Subnet.__table__
_P = Port.__table__
_IP = IPAllocation.__table__
_PSG = PortSecurityGroup.__table__
_PP = PortProvisioning.__table__
_SG = SecurityGroup.__table__

_PORT_FILTERS = {"id": _P.c.id, "network_id": _P.c.network_id, "device_id": _P.c.device_id,
                 "device_owner": _P.c.device_owner, "project_id": _P.c.project_id,
                 "tenant_id": _P.c.project_id, "name": _P.c.name, "mac_address": _P.c.mac_address}
_PORT_FILTERS_ADMIN = {**_PORT_FILTERS, "binding:host_id": _P.c.binding_host_id}


@functools.lru_cache(maxsize=256)
def _ports_statement(visibility: str, keys: tuple):
    q = select(_P)
    if visibility != "admin":
        q = q.select_from(_P.join(_N, _N.c.id == _P.c.network_id)).where(or_(
            _owned(_P.c.project_id, visibility), _owned(_N.c.project_id, visibility)))
    return _where_filters(q, _PORT_FILTERS_ADMIN if visibility == "admin" else _PORT_FILTERS, keys)




def _holds_fixed_ips(conds: list[tuple[str, str]]):
    """Every (key, value) of a ``fixed_ips`` filter matches one of the port's addresses."""
    def address(key: str, value: str):
        if key == "ip_address_substr":
            return codepoint.has_substring(_IP.c.ip_address, value)
        return codepoint.is_in(_IP.c.ip_address if key == "ip_address" else _IP.c.subnet_id, [value])
    return and_(true(), *(exists().where(_IP.c.port_id == _P.c.id, address(k, v)) for k, v in conds))


def _holds_group(values: list):
    return exists().where(_PSG.c.port_id == _P.c.id, _PSG.c.security_group_id.in_([str(v) for v in values]))


# The view's fields in SQL (``list_query``), as ``_port_view`` shows them to an admin or, without
# the admin's fields, to anyone else.
_PORT_COLUMNS = {
    "id": list_query.Plain(_P.c.id), "name": list_query.Plain(_P.c.name, func.coalesce(_P.c.name, "")),
    "description": func.coalesce(_P.c.description, ""), "network_id": list_query.Plain(_P.c.network_id),
    "project_id": list_query.Plain(_P.c.project_id), "mac_address": list_query.Plain(_P.c.mac_address),
    "admin_state_up": func.coalesce(_P.c.admin_state_up, False), "status": _P.c.status,
    "device_id": list_query.Plain(_P.c.device_id, func.coalesce(_P.c.device_id, "")),
    "device_owner": list_query.Plain(_P.c.device_owner, func.coalesce(_P.c.device_owner, "")),
    "fixed_ips": list_query.Holds(_holds_fixed_ips), "security_groups": list_query.Holds(_holds_group),
    "port_security_enabled": func.coalesce(_P.c.port_security_enabled, False),
    "binding:vnic_type": _P.c.binding_vnic_type, "ip_allocation": list_query.Fixed("immediate"),
    "tags": list_query.Fixed([]), "revision_number": func.coalesce(_P.c.revision_number, 0),
    **{key: list_query.Fixed(None) for key in ADMIN_ONLY_PORT_FIELDS},
}
_PORT_COLUMNS_ADMIN = {
    **_PORT_COLUMNS,
    "binding:host_id": list_query.Plain(_P.c.binding_host_id, func.coalesce(_P.c.binding_host_id, "")),
    "binding:vif_type": _P.c.binding_vif_type,
}

_PORT_BY_ID = select(_P).where(_P.c.id == bindparam("b_id"))
_PORT_BINDING = select(_P.c.id, _P.c.status, _P.c.admin_state_up, _P.c.binding_host_id,
                       _P.c.device_id).where(_P.c.id == bindparam("b_id"))
_SET_PORT_STATUS = update(_P).where(_P.c.id == bindparam("b_id")).values(
    status=bindparam("b_status"), revision_number=bindparam("b_revision"), updated_at=bindparam("b_now"))


@functools.lru_cache(maxsize=2)
def _port_parts_statement(admin: bool):
    """What a port view needs besides the port's row, for the ports ``b_ids``, in one statement:
    rows (port_id, kind, a, b, created) of kind ``i`` (a: subnet, b: address, created: the
    subnet's created_at), ``g`` (a: security group) and, for ``admin``, ``p`` (a: provisioning
    component, b: "satisfied" or "pending")."""
    ids = bindparam("b_ids", expanding=True)
    parts = [
        select(_IP.c.port_id, literal_column("'i'").label("kind"), _IP.c.subnet_id.label("a"),
               _IP.c.ip_address.label("b"), _S.c.created_at.label("created"))
        .select_from(_IP.join(_S, _S.c.id == _IP.c.subnet_id)).where(_IP.c.port_id.in_(ids)),
        select(_PSG.c.port_id, literal_column("'g'"), _PSG.c.security_group_id, null(), null())
        .where(_PSG.c.port_id.in_(ids)),
    ]
    if admin:
        parts.append(select(_PP.c.port_id, literal_column("'p'"), _PP.c.component,
                            case((_PP.c.satisfied, literal_column("'satisfied'")),
                                 else_=literal_column("'pending'")), null())
                     .where(_PP.c.port_id.in_(ids)))
    return union_all(*parts)


_GATEWAYS_HELD = select(_IP.c.ip_address, _IP.c.subnet_id).select_from(
    _IP.join(_S, _S.c.id == _IP.c.subnet_id)).where(_IP.c.port_id == bindparam("b_id"),
                                                   _IP.c.ip_address == _S.c.gateway_ip)
_SUBNETS_OF = select(_S).where(_S.c.network_id == bindparam("b_network")).order_by(_S.c.created_at, _S.c.id)
_GROUP_PROJECT = select(_SG.c.project_id).where(_SG.c.id == bindparam("b_id"))
_INSERT_PORT_GROUP = insert(_PSG)

PortStatusListener = Callable[[RequestContext, dict, str], Awaitable[None]]


def _check_guest_port_on_foreign_network(body: dict, action: str) -> None:
    """On a network it does not own (a shared one), a project's ports are its guests' ports:
    it may not lift their anti-spoofing (``port_security_enabled``) nor give them a
    ``device_owner`` other than a compute one (a router's or DHCP server's role, whose ports
    carry no security groups). Neutron's ``*:port_security_enabled`` and ``*:device_owner``
    rules: the network's owner or an admin only."""
    if body.get("port_security_enabled") is False:
        raise _not_owner(f"{action}:port_security_enabled")
    owner = body.get("device_owner")
    if owner and not owner.startswith("compute:"):
        raise _not_owner(f"{action}:device_owner")

def _check_network_device_owner(ctx: RequestContext, owner: str | None, action: str) -> None:
    """Only an admin (the service acting for itself included) gives a port a ``network:*`` owner:
    such a port passes for a router's, a DHCP server's or a floating IP's, and carries no security
    groups. Neutron's ``*:device_owner`` rule lets the network's owner too; here the router, DHCP
    and floating IP APIs make those ports, and nobody else."""
    if owner and owner.startswith(NETWORK_OWNER_PREFIX) and not ctx.is_admin:
        raise _not_owner(f"{action}:device_owner")


def may_hold_gateway(device_owner: str | None) -> bool:
    """Whether a port of ``device_owner`` may hold its subnet's gateway address: a router's
    interface, or a port owned by nothing yet (made to become one through ``add_router_interface``).
    A guest's, DHCP's or a router gateway's port holding it would take the traffic of every guest
    of the subnet."""
    return (device_owner or "") in (ROUTER_INTERFACE_OWNER, "")


async def _check_gateway_holder(s, port_id: str, device_owner: str | None) -> None:
    """InvalidIpForSubnet when the port holds a gateway address its ``device_owner`` may not."""
    if may_hold_gateway(device_owner):
        return
    held = (await s.execute(_GATEWAYS_HELD, {"b_id": port_id})).first()
    if held is not None:
        raise exceptions.InvalidIpForSubnet.gateway_held(held.ip_address, held.subnet_id)


async def _check_floating_ips_kept(s, port_id: str) -> None:
    """The port still holds every fixed address a floating IP points at (Neutron's
    ``prevent_internal_ip_change_for_fip``): freed, the address would go to another port, and the
    floating IP's traffic with it."""
    stranded = (await s.execute(select(FloatingIP.id).where(
        FloatingIP.fixed_port_id == port_id, FloatingIP.fixed_ip_address.is_not(None),
        FloatingIP.fixed_ip_address.not_in(select(IPAllocation.ip_address).where(
            IPAllocation.port_id == port_id))).limit(1))).first()
    if stranded is not None:
        raise exceptions.BadRequest(resource="port", msg=(
            f"Cannot update the fixed_ips of the port {port_id}, because its original fixed_ip has been "
            "associated to a floating ip"))


async def delete_port_rows(s, port_id: str) -> None:
    """The port's rows go: its addresses, groups, provisioning blocks, router attachment, itself."""
    await s.execute(delete(IPAllocation).where(IPAllocation.port_id == port_id))
    await s.execute(delete(PortSecurityGroup).where(PortSecurityGroup.port_id == port_id))
    await provisioning.port_deleted(s, port_id)
    await s.execute(delete(RouterPort).where(RouterPort.port_id == port_id))
    await s.execute(delete(Port).where(Port.id == port_id))


async def _unassociate_floating_ips(s, ctx: RequestContext, port_id: str) -> None:
    """The port ``port_id`` goes: its floating IPs stay, unassociated (Neutron's behaviour)."""
    for fid, router_id in (await s.execute(select(FloatingIP.id, FloatingIP.router_id)
                                           .where(FloatingIP.fixed_port_id == port_id))).all():
        NetworkStore.router_changed(s, ctx, router_id)
        await s.execute(update(FloatingIP).where(FloatingIP.id == fid).values(
            fixed_port_id=None, fixed_ip_address=None, router_id=None, status="DOWN",
            revision_number=FloatingIP.revision_number + 1, updated_at=utcnow()))


class Ports:
    """Ports: their part of the bus and of the Networking API, their status and binding."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas, security_groups: SecurityGroups, cfg):
        self.store = store
        self.quotas = quotas
        self.security_groups = security_groups
        self.cfg = cfg
        self._port_status_listeners: list[PortStatusListener] = []
        # subnet id -> the address this process last handed out there (a hint, see _allocate_from_subnet)
        self._last_ip: dict[str, str] = {}

    def add_port_status_listener(self, listener: PortStatusListener) -> None:
        """Call ``listener(ctx, port, previous_status)`` after a port's status changed (not over the bus)."""
        self._port_status_listeners.append(listener)

    async def view_for_hooks(self, s, row) -> dict | None:
        """The admin's view of ``row`` for the port change hooks; None when there is no hook."""
        if not self.store.has_port_hooks:
            return None
        return (await self._port_views(s, RequestContext(is_admin=True), [row]))[0]

    def _port_query(self, ctx: RequestContext):
        q = select(Port)
        if not ctx.is_admin:
            q = q.join(Network, Network.id == Port.network_id).where(or_(
                Port.project_id == ctx.project_id, Network.project_id == ctx.project_id))
        return q

    async def port_row(self, s, ctx: RequestContext, port_id: str) -> Port:
        """The port as an ORM object, if ``ctx`` sees it (PortNotFound otherwise)."""
        row = (await s.execute(self._port_query(ctx).where(Port.id == str(port_id)))).scalar_one_or_none()
        if row is None:
            raise exceptions.PortNotFound(port_id=port_id)
        return row

    @staticmethod
    async def _port_parts(s, ids: list[str], admin: bool) -> tuple[dict, dict, dict]:
        """The ports' addresses ((subnet created_at, subnet, int, address) each), security groups and
        (``admin``) provisioning blocks, by port id: one statement per chunk of ports."""
        ips: dict[str, list[tuple]] = {i: [] for i in ids}
        groups: dict[str, list[str]] = {i: [] for i in ids}
        blocks: dict[str, dict] = {}
        statement = _port_parts_statement(admin)
        for chunk in _chunks(ids):
            for pid, kind, a, b, created in (await s.execute(statement, {"b_ids": chunk})).all():
                if kind == "i":
                    ips[pid].append((created, a, int(ipaddress.ip_address(b)), b))
                elif kind == "g":
                    groups[pid].append(a)
                else:
                    blocks.setdefault(pid, {})[a] = b
        return ips, groups, blocks

    async def _port_views(self, s, ctx: RequestContext, rows: list) -> list[dict]:
        ips, groups, blocks = await self._port_parts(s, [r.id for r in rows], ctx.is_admin)
        return [self._port_doc(ctx, r, ips[r.id], groups[r.id], blocks.get(r.id, {})) for r in rows]

    def _port_doc(self, ctx: RequestContext, row, ips: list[tuple], groups: list[str], blocks: dict) -> dict:
        """The view of the port ``row`` (an ORM object or any object with its columns as attributes)."""
        fixed = [{"subnet_id": sid, "ip_address": ip} for _, sid, _, ip in sorted(ips)]
        doc = self._port_view(row, fixed, sorted(groups))
        doc[provisioning.ATTRIBUTE] = blocks
        if not ctx.is_admin:
            for key in ADMIN_ONLY_PORT_FIELDS:
                doc.pop(key, None)
        return doc

    @staticmethod
    def _port_view(row: Port, fixed_ips: list[dict], security_groups: list[str]) -> dict:
        return {
            "id": row.id, "name": row.name or "", "description": row.description or "",
            "network_id": row.network_id, "project_id": row.project_id, "tenant_id": row.project_id,
            "mac_address": row.mac_address, "admin_state_up": bool(row.admin_state_up),
            "status": row.status, "device_id": row.device_id or "", "device_owner": row.device_owner or "",
            "fixed_ips": fixed_ips, "security_groups": security_groups,
            "port_security_enabled": bool(row.port_security_enabled),
            "binding:host_id": row.binding_host_id or "", "binding:vif_type": row.binding_vif_type,
            "binding:vif_details": dict(row.binding_vif_details or {}),
            "binding:vnic_type": row.binding_vnic_type, "binding:profile": dict(row.binding_profile or {}),
            "ip_allocation": "immediate", "tags": [], "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at or row.created_at), "revision_number": row.revision_number or 0,
        }

    @staticmethod
    def _binding(host: str) -> dict:
        if host:
            # vif_plugged_event: the host's L2 agent reports the plugged device, which sends the
            # server network-vif-plugged (the compute derives what it waits for from this).
            return {"binding_host_id": host, "binding_vif_type": "bridge",
                    "binding_vif_details": {"port_filter": True, "connectivity": "l2",
                                            "vif_plugged_event": "plug"}}
        return {"binding_host_id": "", "binding_vif_type": "unbound", "binding_vif_details": {}}

    async def _subnets_of(self, s, network_id: str) -> list:
        """The network's subnets (Core rows), oldest first."""
        return (await s.execute(_SUBNETS_OF, {"b_network": network_id})).all()

    async def _insert_ip(self, s, subnet, port_id: str, address: str) -> bool:
        """Claim ``address``; False when another port holds it (the primary key said so)."""
        return await insert_ignoring_duplicate(s, _IP, {"network_id": subnet.network_id, "ip_address": address,
                                                        "subnet_id": subnet.id, "port_id": port_id})

    async def _allocate_from_subnet(self, s, subnet: Subnet, port_id: str, mac: str) -> str:
        if subnet.ip_version == 6 and subnet.ipv6_address_mode in ("slaac", "dhcpv6-stateless"):
            address = ipam.eui64(subnet.cidr, mac)
            if not await self._insert_ip(s, subnet, port_id, address):
                raise exceptions.IpAddressInUse(net_id=subnet.network_id, ip_address=address)
            return address
        pools = subnet.allocation_pools or []
        # Usually the address after the last one handed out here is free: one INSERT, where
        # reading every address of the network costs O(addresses in use) per port. The primary
        # key decides; a few misses (another process, a fragmented range) fall back to the scan.
        # Each candidate is claimed here before its INSERT, so the allocations this process runs
        # at once try different addresses instead of racing each other into the scan.
        for _ in range(IP_HINT_ATTEMPTS):
            last = self._last_ip.get(subnet.id)
            candidate = next(ipam.after(pools, last), None) if last is not None else None
            if candidate is None:
                break
            self._last_ip[subnet.id] = candidate
            if await self._insert_ip(s, subnet, port_id, candidate):
                return candidate
        tried: set[str] = set()
        while True:  # the lowest free address, until one is ours or the subnet is really full
            taken = set((await s.execute(select(IPAllocation.ip_address)
                                         .where(IPAllocation.network_id == subnet.network_id))).scalars())
            candidate = next(ipam.candidates(pools, taken | tried), None)
            if candidate is None:
                break
            if await self._insert_ip(s, subnet, port_id, candidate):
                self._last_ip[subnet.id] = candidate
                return candidate
            # A concurrent request took it first: the next one (each miss is an address taken
            # since, so this ends; giving up after a fixed number of misses answered "no more
            # addresses" with a third of a /24 free under 100 requests at once).
            tried.add(candidate)
        raise exceptions.IpAddressGenerationFailure(net_id=subnet.network_id)

    async def _allocate_ips(self, s, network_id: str, port_id: str, mac: str,
                            requests: list[dict] | None, subnets: list | None = None) -> list[dict]:
        """Allocate the addresses ``requests`` ask for (None: Neutron's default) on the network's
        ``subnets`` (read when not given); the allocations, as ``fixed_ips`` entries."""
        if subnets is None:
            subnets = await self._subnets_of(s, network_id)
        allocated: list[dict] = []
        if requests is None:  # Neutron's default: one IPv4 address, and IPv6 as the subnets say
            v4 = [sn for sn in subnets if sn.ip_version == 4]
            v6 = [sn for sn in subnets if sn.ip_version == 6]
            for family in (v4, [sn for sn in v6 if sn.ipv6_address_mode not in ("slaac", "dhcpv6-stateless")]):
                for i, sn in enumerate(family):
                    try:
                        allocated.append({"subnet_id": sn.id,
                                          "ip_address": await self._allocate_from_subnet(s, sn, port_id, mac)})
                        break
                    except exceptions.IpAddressGenerationFailure:
                        if i == len(family) - 1:
                            raise
            for sn in v6:
                if sn.ipv6_address_mode in ("slaac", "dhcpv6-stateless"):
                    allocated.append({"subnet_id": sn.id,
                                      "ip_address": await self._allocate_from_subnet(s, sn, port_id, mac)})
            return allocated
        by_id = {sn.id: sn for sn in subnets}
        for req in requests:
            subnet = None
            if "subnet_id" in req:
                subnet = by_id.get(req["subnet_id"])
                if subnet is None:
                    exists = (await s.execute(select(Subnet.id).where(Subnet.id == req["subnet_id"]))).first()
                    if exists is None:
                        raise exceptions.SubnetNotFound(subnet_id=req["subnet_id"])
                    raise exceptions.InvalidInput(
                        error_message=f"Failed to create port on network {network_id}, because fixed_ips "
                                      f"included invalid subnet {req['subnet_id']}")
            if "ip_address" in req:
                address = req["ip_address"]
                if subnet is not None:
                    if not ipam.usable_in_subnet(address, subnet.cidr):
                        raise exceptions.InvalidIpForSubnet(ip_address=address)
                else:
                    subnet = next((sn for sn in subnets if ipam.usable_in_subnet(address, sn.cidr)), None)
                    if subnet is None:
                        raise exceptions.InvalidIpForNetwork(ip_address=address)
                if not await self._insert_ip(s, subnet, port_id, address):
                    raise exceptions.IpAddressInUse(net_id=network_id, ip_address=address)
                allocated.append({"subnet_id": subnet.id, "ip_address": address})
            else:
                allocated.append({"subnet_id": subnet.id,
                                  "ip_address": await self._allocate_from_subnet(s, subnet, port_id, mac)})
        return allocated

    async def _check_security_groups(self, s, ctx: RequestContext, project: str | None,
                                     group_ids: list[str]) -> list[str]:
        out = []
        for gid in dict.fromkeys(group_ids):
            row = (await s.execute(_GROUP_PROJECT, {"b_id": gid})).first()
            if row is None or (not ctx.is_admin and row[0] != project):
                raise exceptions.SecurityGroupNotFound(id=gid)
            out.append(gid)
        return out

    async def create_port_in(self, s, ctx: RequestContext, body: dict, binding_host_id: str | None = None) -> dict:
        """``create_port`` inside the caller's transaction ``s`` (a router's or floating IP's port)."""
        body = attrs.validate_body("port", body, create=True, is_admin=ctx.is_admin)
        network = await network_brief(s, ctx, body["network_id"])
        project = project_for_create(ctx, body)
        if not ctx.is_admin and network.project_id != ctx.project_id and not network.shared:
            # Neutron's create_port rule (the network's owner, or a shared network): what else a
            # project sees is an external network, whose addresses are for floating IPs and router
            # gateways (each under its own quota), not for plain ports draining the pool.
            raise _not_owner("create_port")
        _check_network_device_owner(ctx, body.get("device_owner"), "create_port")
        if not ctx.is_admin and network.project_id != ctx.project_id:
            if "mac_address" in body:
                raise _not_owner("create_port:mac_address")
            if any("ip_address" in f for f in body.get("fixed_ips") or []):
                raise _not_owner("create_port:fixed_ips:ip_address")
            _check_guest_port_on_foreign_network(body, "create_port")
        port_security = body.get("port_security_enabled", bool(network.port_security_enabled))
        groups = body.get("security_groups")
        if groups and not port_security:
            raise exceptions.PortSecurityAndIPRequiredForSecurityGroups()
        if groups is None:
            groups = []
            if port_security and not body["device_owner"].startswith("network:") and project:
                groups = [await self.security_groups.ensure_default_group_in(s, project)]
        else:
            groups = await self._check_security_groups(s, ctx, project, groups)
        mac = body.get("mac_address")
        if mac is not None:
            used = (await s.execute(select(Port.id).where(Port.network_id == network.id,
                                                          Port.mac_address == mac))).first()
            if used is not None:
                raise exceptions.MacAddressInUse(net_id=network.id, mac=mac)
        now = utcnow()
        port_id = new_id()
        values = dict(id=port_id, network_id=network.id, project_id=project, name=body["name"],
                      description=body["description"], mac_address=mac or ipam.random_mac(),
                      admin_state_up=body["admin_state_up"], status="DOWN", device_id=body["device_id"],
                      device_owner=body["device_owner"], binding_vnic_type=body["binding:vnic_type"],
                      binding_profile=body["binding:profile"], port_security_enabled=port_security,
                      revision_number=0, created_at=now, updated_at=now,
                      **self._binding(body["binding:host_id"] if binding_host_id is None else binding_host_id))
        for attempt in range(MAX_MAC_ATTEMPTS):
            # the id is new: only the network's MAC key can refuse the row
            if await insert_ignoring_duplicate(s, _P, values):
                break
            if mac is not None or attempt == MAX_MAC_ATTEMPTS - 1:
                raise exceptions.MacAddressInUse(net_id=network.id, mac=values["mac_address"])
            values["mac_address"] = ipam.random_mac()
        subnets = await self._subnets_of(s, network.id)
        allocated = await self._allocate_ips(s, network.id, port_id, values["mac_address"], body.get("fixed_ips"),
                                             subnets)
        if any("ip_address" in f for f in body.get("fixed_ips") or []):  # pools never hold a gateway
            await _check_gateway_holder(s, port_id, body["device_owner"])
        for gid in groups:
            await s.execute(_INSERT_PORT_GROUP, {"port_id": port_id, "security_group_id": gid})
        await self.quotas.consume(s, project, port=1)
        by_id = {sn.id: sn for sn in subnets}
        on_dhcp_subnet = bool(network.admin_state_up) and any(
            by_id[a["subnet_id"]].enable_dhcp and by_id[a["subnet_id"]].ip_version == 4 for a in allocated)
        components = await provisioning.port_created(s, self.cfg, port_id, values["binding_host_id"],
                                                     body["device_owner"], on_dhcp_subnet=on_dhcp_subnet)
        self.store.network_changed(s, ctx, "port_create_end", network.id)
        # The view from what was written (the row, its addresses, groups and blocks): nothing to read back.
        if values["binding_profile"]:
            values["binding_profile"] = json.loads(json.dumps(values["binding_profile"]))
        ips = [(by_id[a["subnet_id"]].created_at, a["subnet_id"], int(ipaddress.ip_address(a["ip_address"])),
                a["ip_address"]) for a in allocated]
        viewer = ctx if binding_host_id is None else ctx.elevated()
        return self._port_doc(viewer, types.SimpleNamespace(**values), ips, list(groups),
                              {c: "pending" for c in components} if viewer.is_admin else {})

    async def create_port(self, ctx: RequestContext, port: dict, binding_host_id: str | None = None) -> dict:
        """Create a port with ``ctx``'s authority. ``binding_host_id`` (network 1.2, sent only by the
        compute side, which the bus trusts): once every check of ``port`` passed as ``ctx``, the port
        is bound to that host with the service's authority in the same transaction, as an admin's
        ``update_port`` of ``binding:host_id`` right after the create would bind it (Nova creates a
        server's port with the user's token and binds it with its admin client); the port as an admin
        sees it. None: only what ``port`` says, with ``ctx``'s authority."""
        async with self.store.transaction() as s:
            return await self.create_port_in(s, ctx, port, binding_host_id)

    async def create_ports(self, ctx: RequestContext, ports: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self.create_port_in(s, ctx, p) for p in _bulk(ports)]

    async def get_port(self, ctx: RequestContext, port_id: str, fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            rows = (await s.execute(_ports_statement(_visibility(ctx), ("id",)),
                                    {"f0": [str(port_id)], "b_project": ctx.project_id})).all()
            if not rows:
                raise exceptions.PortNotFound(port_id=port_id)
            return attrs.select_fields((await self._port_views(s, ctx, rows[:1]))[0], fields)

    async def list_ports(self, ctx: RequestContext, filters: dict | None = None,
                         fields: list[str] | None = None, sort_key=None, sort_dir=None,
                         limit: int | None = None, marker: str | None = None,
                         page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(PORT_FIELDS, _PORT_COLUMNS_ADMIN if ctx.is_admin else _PORT_COLUMNS,
                                     filters=filters, sort_key=sort_key, sort_dir=sort_dir, limit=limit,
                                     marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_port(ctx, m))
        async with self.store.reader() as s:
            rows = (await s.execute(plan.statement(_ports_statement(_visibility(ctx), ())),
                                    {"b_project": ctx.project_id})).all()
            docs = await self._port_views(s, ctx, plan.in_order(rows))
        return [attrs.select_fields(d, fields) for d in docs]

    async def update_port(self, ctx: RequestContext, port_id: str, port: dict,
                          expected_device_id: str | None = None) -> dict:
        """Update a port; with ``expected_device_id`` only if its device_id still is that (else PortInUse)."""
        body = attrs.validate_body("port", port, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self.port_row(s, ctx, port_id)
            network = (await s.execute(select(Network).where(Network.id == row.network_id))).scalar_one()
            if not ctx.is_admin and ctx.project_id != row.project_id:
                # Neutron's update_port rule: the port's project. The network's owner sees the
                # other projects' ports on it (and may delete them), not rewrite them.
                raise _not_owner("update_port")
            before = await self.view_for_hooks(s, row)
            if expected_device_id is not None:
                new_device = body.get("device_id", row.device_id)
                claimed = await s.execute(update(Port).where(
                    Port.id == row.id, Port.device_id == expected_device_id).values(device_id=new_device)
                    .execution_options(synchronize_session=False))
                if claimed.rowcount != 1:
                    await s.refresh(row)
                    raise exceptions.PortInUse(
                        f"Unable to complete operation on port {row.id} for network {row.network_id}. "
                        f"Port already has an attached device {row.device_id}.", port_id=row.id)
                await s.refresh(row)
            if body.get("device_owner", row.device_owner) != row.device_owner:
                _check_network_device_owner(ctx, body["device_owner"], "update_port")
            if not ctx.is_admin and network.project_id != ctx.project_id:
                _check_guest_port_on_foreign_network(
                    {k: v for k, v in body.items() if k != "device_owner" or v != row.device_owner}, "update_port")
            if not ctx.is_admin and body.get("device_id", row.device_id) != row.device_id:
                await self._check_device_id_not_foreign_router(
                    s, body.get("device_owner", row.device_owner), body["device_id"], row.project_id)
            if "mac_address" in body and body["mac_address"] != row.mac_address:
                if not ctx.is_admin:
                    raise _not_owner("update_port:mac_address")
                used = (await s.execute(select(Port.id).where(Port.network_id == row.network_id,
                                                              Port.mac_address == body["mac_address"]))).first()
                if used is not None:
                    raise exceptions.MacAddressInUse(net_id=row.network_id, mac=body["mac_address"])
            addresses_changed = "mac_address" in body and body["mac_address"] != row.mac_address
            if "fixed_ips" in body:
                if not ctx.is_admin and network.project_id != ctx.project_id and any(
                        "ip_address" in f for f in body["fixed_ips"]):
                    raise _not_owner("update_port:fixed_ips:ip_address")
                addresses_changed |= await self._replace_ips(s, row, body["fixed_ips"])
                await _check_floating_ips_kept(s, row.id)
            if "fixed_ips" in body or "device_owner" in body:
                await _check_gateway_holder(s, row.id, body.get("device_owner", row.device_owner))
            port_security = body.get("port_security_enabled", bool(row.port_security_enabled))
            current_groups = list((await s.execute(select(PortSecurityGroup.security_group_id)
                                                   .where(PortSecurityGroup.port_id == row.id))).scalars())
            groups = body.get("security_groups", current_groups)
            if groups and not port_security:
                raise exceptions.PortSecurityAndIPRequiredForSecurityGroups()
            if "security_groups" in body:
                groups = await self._check_security_groups(s, ctx, row.project_id, groups)
                await s.execute(delete(PortSecurityGroup).where(PortSecurityGroup.port_id == row.id))
                for gid in groups:
                    await s.execute(insert(PortSecurityGroup).values(port_id=row.id, security_group_id=gid))
            simple = {"name": "name", "description": "description", "admin_state_up": "admin_state_up",
                      "device_id": "device_id", "device_owner": "device_owner", "mac_address": "mac_address",
                      "binding:vnic_type": "binding_vnic_type", "binding:profile": "binding_profile",
                      "port_security_enabled": "port_security_enabled"}
            for key, column in simple.items():
                if key in body:
                    setattr(row, column, body[key])
            host_changed = "binding:host_id" in body and body["binding:host_id"] != (row.binding_host_id or "")
            if host_changed:
                for column, value in self._binding(body["binding:host_id"]).items():
                    setattr(row, column, value)
                row.status = "DOWN"  # the new host's agent reports it up again
            if body or expected_device_id is not None:
                row.revision_number = (row.revision_number or 0) + 1
                row.updated_at = utcnow()
            await s.flush()
            if host_changed or addresses_changed:
                await provisioning.port_updated(s, self.cfg, row.id, host_changed=host_changed,
                                                host=row.binding_host_id or "",
                                                addresses_changed=addresses_changed,
                                                device_owner=row.device_owner or "")
            self.store.network_changed(s, ctx, "port_update_end", row.network_id)
            doc = (await self._port_views(s, ctx, [row]))[0]
            if before is not None:
                await self.store.port_changed(s, ctx, before, doc if ctx.is_admin else
                                              await self.view_for_hooks(s, row))
            return doc

    @staticmethod
    async def _check_device_id_not_foreign_router(s, owner: str | None, device_id: str,
                                                  project_id: str | None) -> None:
        """A router interface port names no router of another project (Neutron's
        ``_enforce_device_owner_not_router_intf_or_device_id``, for non-admins)."""
        if owner != ROUTER_INTERFACE_OWNER or not device_id:
            return
        router_project = (await s.execute(select(Router.project_id).where(Router.id == device_id))).first()
        if router_project is not None and router_project[0] != project_id:
            raise exceptions.DeviceIDNotOwnedByTenant(device_id=device_id)

    async def _replace_ips(self, s, row: Port, requests: list[dict]) -> bool:
        """Give ``row`` the addresses ``requests`` ask for; True when they changed."""
        current = {ip: sid for sid, ip in (await s.execute(
            select(IPAllocation.subnet_id, IPAllocation.ip_address)
            .where(IPAllocation.port_id == row.id))).all()}
        keep = set()
        new_requests = []
        for req in requests:
            ip = req.get("ip_address")
            if ip is not None and ip in current and req.get("subnet_id", current[ip]) == current[ip]:
                keep.add(ip)
            else:
                new_requests.append(req)
        # subnet-only requests are satisfied by an address this port already has on that subnet
        remaining = []
        for req in new_requests:
            if "ip_address" not in req:
                held = next((ip for ip, sid in current.items() if sid == req["subnet_id"] and ip not in keep), None)
                if held is not None:
                    keep.add(held)
                    continue
            remaining.append(req)
        for ip in set(current) - keep:
            await s.execute(delete(IPAllocation).where(IPAllocation.network_id == row.network_id,
                                                       IPAllocation.ip_address == ip))
        if remaining:
            await self._allocate_ips(s, row.network_id, row.id, row.mac_address, remaining)
        return bool(remaining) or bool(set(current) - keep)

    async def delete_port(self, ctx: RequestContext, port_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self.port_row(s, ctx, port_id)
            if not ctx.is_admin and row.project_id != ctx.project_id:
                network_owner = (await s.execute(select(Network.project_id)
                                                  .where(Network.id == row.network_id))).scalar_one()
                if network_owner != ctx.project_id:
                    raise _not_owner("delete_port")
            if await self._held_by_l3(s, row.id):  # Neutron's prevent_l3_port_deletion
                raise exceptions.ServicePortInUse(port_id=row.id,
                                                  reason=f"has device owner {row.device_owner}")
            before = await self.view_for_hooks(s, row)
            await _unassociate_floating_ips(s, ctx, row.id)
            await delete_port_rows(s, row.id)
            self.store.network_changed(s, ctx, "port_delete_end", row.network_id)
            if before is not None:
                await self.store.port_changed(s, ctx, before, None)
            await self.quotas.release(s, row.project_id, port=1)

    @staticmethod
    async def _held_by_l3(s, port_id: str) -> bool:
        """Whether a router (an interface or its gateway) or a floating IP holds the port: by the
        rows that say so, not by the port's device_owner, which a look-alike carries too."""
        held = union_all(
            select(RouterPort.port_id).where(RouterPort.port_id == port_id),
            select(Router.gw_port_id).where(Router.gw_port_id == port_id),
            select(FloatingIP.floating_port_id).where(FloatingIP.floating_port_id == port_id))
        return (await s.execute(held.limit(1))).first() is not None

    async def update_port_status(self, ctx: RequestContext, port_id: str, status: str, *,
                                 only_if: Callable[[Port], bool] | None = None) -> dict | None:
        """Set a port's status (the L2 agent's report: ACTIVE once the device is wired, DOWN ...).

        With ``only_if``, only when ``only_if(row)`` holds for the row read in this transaction
        (None otherwise): a check and its change that no concurrent update can come between."""
        if status not in attrs.PORT_STATUSES:
            raise attrs.bad("status", f"{status} is not in {list(attrs.PORT_STATUSES)}")
        if only_if is None:
            return await self.change_port_status(ctx, port_id, lambda row, blocks: status)
        return await self.change_port_status(ctx, port_id, lambda row, blocks: status if only_if(row) else None)

    async def change_port_status(self, ctx: RequestContext, port_id: str,
                                 decide: Callable[[Any, dict[str, bool]], "str | None"]) -> dict | None:
        """``update_port_status`` with the status chosen in the transaction: ``decide(row,
        blocks)`` (the port's row and its provisioning blocks, ``{component: satisfied}``, as read
        in this transaction) gives the status to set, or None to leave the port alone (and return
        None). Not over the bus (in-process callers: the agent protocol, provisioning)."""
        async with self.store.transaction() as s:
            row = await self.port_by_id(s, port_id)
            if row is None:
                raise exceptions.PortNotFound(port_id=port_id)
            doc, previous = await self.set_port_status_in(s, ctx, row, decide)
        if doc is not None:
            await self.tell_port_status(ctx, doc, previous)
        return doc

    @staticmethod
    async def port_by_id(s, port_id: str):
        """The port's row (a Core row, the ORM object's attributes), None when there is none."""
        return (await s.execute(_PORT_BY_ID, {"b_id": str(port_id)})).first()

    async def set_port_status_in(self, s, ctx: RequestContext, row, decide) -> tuple[dict | None, str | None]:
        """``change_port_status`` inside the transaction ``s`` for the port ``row`` read in it:
        (the admin view after the change, the status before), (None, None) when ``decide`` said
        None. The caller tells the listeners (``tell_port_status``) once ``s`` committed."""
        ips, groups, blocks = await self._port_parts(s, [row.id], True)
        views = blocks.get(row.id, {})
        status = decide(row, {c: v == "satisfied" for c, v in views.items()})
        if status is None:
            return None, None
        if status not in attrs.PORT_STATUSES:
            raise attrs.bad("status", f"{status} is not in {list(attrs.PORT_STATUSES)}")
        values = row._asdict()
        previous = row.status
        if previous != status:
            values.update(status=status, revision_number=(row.revision_number or 0) + 1, updated_at=utcnow())
            await s.execute(_SET_PORT_STATUS, {"b_id": row.id, "b_status": status,
                                               "b_revision": values["revision_number"],
                                               "b_now": values["updated_at"]})
        doc = self._port_doc(ctx.elevated(), types.SimpleNamespace(**values), ips[row.id], groups[row.id], views)
        if previous != status:
            await self.store.port_changed(s, ctx, dict(doc, status=previous), doc)
        return doc, previous

    async def tell_port_status(self, ctx: RequestContext, doc: dict, previous: str | None) -> None:
        """After the commit: the port status listeners, when the status changed."""
        if previous == doc["status"]:
            return
        for listener in list(self._port_status_listeners):
            try:
                await listener(ctx, doc, previous)
            except Exception:
                LOG.exception("port status listener failed for port %s", doc["id"])

    async def port_binding(self, port_id: str) -> dict | None:
        """What an agent report needs of a port, in one row read (no view): id, status,
        admin_state_up, binding:host_id, device_id; None when there is no such port."""
        async with self.store.reader() as s:
            return await self._port_binding_in(s, port_id)

    @staticmethod
    async def _port_binding_in(s, port_id: str) -> dict | None:
        """``port_binding`` in the session ``s`` (e.g. the transaction that acts on it)."""
        row = (await s.execute(_PORT_BINDING, {"b_id": str(port_id)})).first()
        if row is None:
            return None
        return {"id": row.id, "status": row.status, "admin_state_up": bool(row.admin_state_up),
                "binding:host_id": row.binding_host_id or "", "device_id": row.device_id or ""}
