"""Networks and their subnets (Neutron's), one service of the network manager.

A network's delete takes its DHCP ports with it (any other port keeps it: ``NetworkInUse``); a
subnet's gateway address is held only by a port that may hold it (``ports.may_hold_gateway``).
Usage is counted with the change (``NetworkQuotas``); what the DHCP agents serve is told once the
change committed (``NetworkStore.network_changed``).
"""

from __future__ import annotations

import functools
import ipaddress

from sqlalchemy import bindparam, case, delete, exists, false, func, or_, select, update

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import IPAllocation, Network, Port, Subnet, utcnow
from nefos.control.network import attributes as attrs
from nefos.control.network import ipam, list_query, schemas, segments
from nefos.db import json_match
from nefos.control.network.common import (
    bulk as _bulk, check_owner, chunks as _chunks, iso, new_id, not_owner as _not_owner, owned as _owned,
    project_for_create, visibility as _visibility, where_filters as _where_filters,
)
from nefos.control.network.ports import delete_port_rows, may_hold_gateway
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.store import NetworkStore

NETWORK_FIELDS = schemas.fields("network")
SUBNET_FIELDS = schemas.fields("subnet")

# Prebuilt Core statements of the hot paths (a server boot lists networks and subnets, creates a
# port and changes its status twice; the port's are in ``ports.py``): built once, values as bind
# parameters. Statements whose shape depends on the caller are built once per shape
# (``functools.lru_cache``). The visibility of a non-admin caller is one of three shapes
# (``common.visibility``): admin (everything), a project, or no project (``project_id IS NULL``,
# as the ORM compared with None).
_N = Network.__table__
_S = Subnet.__table__

_NETWORK_FILTERS = {"id": _N.c.id, "name": _N.c.name, "project_id": _N.c.project_id,
                    "tenant_id": _N.c.project_id}
_SUBNET_FILTERS = {"id": _S.c.id, "network_id": _S.c.network_id, "name": _S.c.name,
                   "project_id": _S.c.project_id, "tenant_id": _S.c.project_id}


@functools.lru_cache(maxsize=256)
def _networks_statement(visibility: str, keys: tuple):
    """The visible networks, each with its subnets' ids (one row per subnet, in subnet order)."""
    q = select(_N, _S.c.id.label("subnet_id")).select_from(_N.outerjoin(_S, _S.c.network_id == _N.c.id))
    if visibility != "admin":
        q = q.where(or_(_owned(_N.c.project_id, visibility), _N.c.shared.is_(True), _N.c.external.is_(True)))
    return _where_filters(q, _NETWORK_FILTERS, keys).order_by(_S.c.created_at, _S.c.id)


@functools.lru_cache(maxsize=8)
def _visible_networks_statement(visibility: str):
    """The networks the caller sees (one row each), for the list engine to filter and page."""
    q = select(_N)
    if visibility != "admin":
        q = q.where(or_(_owned(_N.c.project_id, visibility), _N.c.shared.is_(True), _N.c.external.is_(True)))
    return q


def _network_columns(is_admin: bool) -> dict:
    """The network view's fields in SQL (``list_query``), as ``_network_view`` shows them to an admin
    or, without the provider attributes, to anyone else."""
    return _NETWORK_COLUMNS_ADMIN if is_admin else _NETWORK_COLUMNS


def _holds_subnet(values: list):
    return exists().where(_S.c.network_id == _N.c.id, _S.c.id.in_([str(v) for v in values]))


_NETWORK_COLUMNS = {
    "id": list_query.Plain(_N.c.id), "name": list_query.Plain(_N.c.name, func.coalesce(_N.c.name, "")),
    "description": func.coalesce(_N.c.description, ""), "project_id": list_query.Plain(_N.c.project_id),
    "admin_state_up": func.coalesce(_N.c.admin_state_up, False),
    "status": _N.c.status, "subnets": list_query.Holds(_holds_subnet),
    "shared": func.coalesce(_N.c.shared, False), "router:external": func.coalesce(_N.c.external, False),
    "mtu": _N.c.mtu, "port_security_enabled": func.coalesce(_N.c.port_security_enabled, False),
    "availability_zone_hints": list_query.Fixed([]), "availability_zones": list_query.Fixed(["nova"]),
    "ipv4_address_scope": list_query.Fixed(None), "ipv6_address_scope": list_query.Fixed(None),
    "l2_adjacency": list_query.Fixed(True), "tags": list_query.Fixed([]),
    "revision_number": func.coalesce(_N.c.revision_number, 0),
    # Shown on external networks only.
    "is_default": case((func.coalesce(_N.c.external, False), func.coalesce(_N.c.is_default, False)), else_=None),
    **{key: list_query.Fixed(None) for key in segments.PROVIDER_KEYS},
}
_NETWORK_COLUMNS_ADMIN = {
    **_NETWORK_COLUMNS,
    "provider:network_type": func.coalesce(_N.c.network_type, segments.LOCAL),
    "provider:segmentation_id": _N.c.segmentation_id,
}


def _holds_nameserver(values: list):
    return or_(false(), *(json_match.array_has(_S.c.dns_nameservers, v) for v in values if isinstance(v, str)))


_SUBNET_COLUMNS = {
    "id": list_query.Plain(_S.c.id), "name": list_query.Plain(_S.c.name, func.coalesce(_S.c.name, "")),
    "description": func.coalesce(_S.c.description, ""), "project_id": list_query.Plain(_S.c.project_id),
    "network_id": list_query.Plain(_S.c.network_id), "ip_version": _S.c.ip_version,
    "cidr": _S.c.cidr, "gateway_ip": _S.c.gateway_ip, "enable_dhcp": func.coalesce(_S.c.enable_dhcp, False),
    "dns_nameservers": list_query.Holds(_holds_nameserver), "ipv6_ra_mode": _S.c.ipv6_ra_mode,
    "ipv6_address_mode": _S.c.ipv6_address_mode, "subnetpool_id": list_query.Fixed(None),
    "service_types": list_query.Fixed([]), "tags": list_query.Fixed([]),
    "revision_number": func.coalesce(_S.c.revision_number, 0),
}


_SUBNET_IDS = (select(_S.c.id, _S.c.network_id).where(_S.c.network_id.in_(bindparam("b_ids", expanding=True)))
               .order_by(_S.c.created_at, _S.c.id))


@functools.lru_cache(maxsize=256)
def _subnets_statement(visibility: str, keys: tuple):
    q = select(_S)
    if visibility != "admin":
        q = q.select_from(_S.join(_N, _N.c.id == _S.c.network_id)).where(or_(
            _owned(_S.c.project_id, visibility), _owned(_N.c.project_id, visibility),
            _N.c.shared.is_(True), _N.c.external.is_(True)))
    return _where_filters(q, _SUBNET_FILTERS, keys)


class Networks:
    """Networks and subnets: their part of the bus and of the Networking API."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas, cfg):
        self.store = store
        self.quotas = quotas
        self.cfg = cfg

    # Networks ---------------------------------------------------------------------------

    def _network_visible(self, ctx: RequestContext):
        if ctx.is_admin:
            return None
        return or_(Network.project_id == ctx.project_id, Network.shared.is_(True),
                   Network.external.is_(True))

    async def _network_row(self, s, ctx: RequestContext, network_id: str) -> Network:
        """The network as an ORM object (to change it)."""
        q = select(Network).where(Network.id == str(network_id))
        cond = self._network_visible(ctx)
        if cond is not None:
            q = q.where(cond)
        row = (await s.execute(q)).scalar_one_or_none()
        if row is None:
            raise exceptions.NetworkNotFound(net_id=network_id)
        return row

    @staticmethod
    def _network_view(row: Network, subnet_ids: list[str]) -> dict:
        view = {
            "id": row.id, "name": row.name or "", "description": row.description or "",
            "project_id": row.project_id, "tenant_id": row.project_id,
            "admin_state_up": bool(row.admin_state_up), "status": row.status,
            "subnets": subnet_ids, "shared": bool(row.shared), "router:external": bool(row.external),
            "mtu": row.mtu, "port_security_enabled": bool(row.port_security_enabled),
            "availability_zone_hints": [], "availability_zones": ["nova"],
            "ipv4_address_scope": None, "ipv6_address_scope": None, "l2_adjacency": True,
            "tags": [], "created_at": iso(row.created_at), "updated_at": iso(row.updated_at or row.created_at),
            "revision_number": row.revision_number or 0,
            **segments.provider_view(row),
        }
        if row.external:
            view["is_default"] = bool(row.is_default)
        return view

    @staticmethod
    def _for_caller(ctx: RequestContext, doc: dict) -> dict:
        """A network's view as ``ctx`` sees it: the provider attributes are an admin's (Neutron's policy)."""
        if not ctx.is_admin:
            for key in segments.PROVIDER_KEYS:
                doc.pop(key, None)
        return doc

    async def _network_views(self, s, rows: list[Network]) -> list[dict]:
        ids = [r.id for r in rows]
        subnets: dict[str, list[str]] = {i: [] for i in ids}
        for chunk in _chunks(ids):
            for sid, nid in (await s.execute(_SUBNET_IDS, {"b_ids": chunk})).all():
                subnets[nid].append(sid)
        return [self._network_view(r, subnets[r.id]) for r in rows]

    async def create_network_in(self, s, ctx: RequestContext, body: dict) -> dict:
        """``create_network`` inside the caller's transaction ``s``."""
        body = attrs.validate_body("network", body, create=True, is_admin=ctx.is_admin)
        network_type, vni, mtu = segments.choose(self.cfg, body)
        project = project_for_create(ctx, body)
        is_default = bool(body["router:external"] and body["is_default"])
        if is_default:
            await self._check_one_default(s, None)
        now = utcnow()
        row = Network(id=new_id(), name=body["name"], description=body["description"], project_id=project,
                      shared=body["shared"], external=body["router:external"], is_default=is_default,
                      admin_state_up=body["admin_state_up"], status="ACTIVE", mtu=mtu,
                      port_security_enabled=body["port_security_enabled"], revision_number=0,
                      network_type=network_type, created_at=now, updated_at=now)
        s.add(row)
        await s.flush()
        row.segmentation_id = await segments.allocate(s, self.cfg, row.id, network_type, vni)
        await self.quotas.consume(s, project, network=1)
        return self._for_caller(ctx, self._network_view(row, []))

    async def create_network(self, ctx: RequestContext, network: dict) -> dict:
        async with self.store.transaction() as s:
            return await self.create_network_in(s, ctx, network)

    async def create_networks(self, ctx: RequestContext, networks: list[dict]) -> list[dict]:
        """Bulk create: all or nothing."""
        async with self.store.transaction() as s:
            return [await self.create_network_in(s, ctx, n) for n in _bulk(networks)]

    async def _visible_networks(self, s, ctx: RequestContext, keys: tuple, params: dict) -> list[dict]:
        """The views of the visible networks that pass the SQL prefilter (one statement)."""
        docs: dict[str, dict] = {}
        for row in (await s.execute(_networks_statement(_visibility(ctx), keys),
                                    {**params, "b_project": ctx.project_id})).all():
            doc = docs.get(row.id)
            if doc is None:
                doc = docs[row.id] = self._for_caller(ctx, self._network_view(row, []))
            if row.subnet_id is not None:
                doc["subnets"].append(row.subnet_id)
        return list(docs.values())

    async def get_network(self, ctx: RequestContext, network_id: str, fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            docs = await self._visible_networks(s, ctx, ("id",), {"f0": [str(network_id)]})
        if not docs:
            raise exceptions.NetworkNotFound(net_id=network_id)
        return attrs.select_fields(docs[0], fields)

    async def list_networks(self, ctx: RequestContext, filters: dict | None = None,
                            fields: list[str] | None = None, sort_key=None, sort_dir=None,
                            limit: int | None = None, marker: str | None = None,
                            page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(NETWORK_FIELDS, _network_columns(ctx.is_admin), filters=filters,
                                     sort_key=sort_key, sort_dir=sort_dir, limit=limit, marker=marker,
                                     page_reverse=page_reverse, get_marker=lambda m: self.get_network(ctx, m))
        async with self.store.reader() as s:
            docs = await self._networks_listed(s, ctx, plan)
        return [attrs.select_fields(d, fields) for d in docs]

    async def networks_matching(self, s, ctx: RequestContext, filters: dict) -> list[dict]:
        """``list_networks(ctx, filters)`` within the session ``s``."""
        plan = await list_query.plan(NETWORK_FIELDS, _network_columns(ctx.is_admin), filters=filters,
                                     sort_key=None, sort_dir=None, limit=None, marker=None,
                                     page_reverse=False, get_marker=None)
        return await self._networks_listed(s, ctx, plan)

    async def _networks_listed(self, s, ctx: RequestContext, plan: list_query.ListPlan) -> list[dict]:
        rows = plan.in_order((await s.execute(plan.statement(_visible_networks_statement(_visibility(ctx))),
                                              {"b_project": ctx.project_id})).all())
        return [self._for_caller(ctx, doc) for doc in await self._network_views(s, rows)]

    async def update_network(self, ctx: RequestContext, network_id: str, network: dict) -> dict:
        body = attrs.validate_body("network", network, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self._network_row(s, ctx, network_id)
            check_owner(ctx, row.project_id, "update_network")
            if body.get("shared") is False and row.shared:
                others = (await s.execute(select(func.count(Port.id)).where(
                    Port.network_id == row.id, Port.project_id != row.project_id))).scalar_one()
                if others:
                    raise exceptions.InvalidSharedSetting(network=row.id)
            if body.get("mtu") is not None and body["mtu"] > segments.max_mtu(self.cfg, row.network_type):
                raise exceptions.InvalidInput(error_message="Requested MTU is too big, maximum is "
                                              f"{segments.max_mtu(self.cfg, row.network_type)}")
            mapping = {"router:external": "external"}
            for key, value in body.items():
                if key != "is_default":
                    setattr(row, mapping.get(key, key), value)
            if not row.external:
                row.is_default = False  # only an external network is ever the default one
            elif body.get("is_default") is not None:
                if body["is_default"]:
                    await self._check_one_default(s, row.id)
                row.is_default = body["is_default"]
            if body:
                row.revision_number = (row.revision_number or 0) + 1
                row.updated_at = utcnow()
            await s.flush()
            self.store.network_changed(s, ctx, "network_update_end", row.id)
            return self._for_caller(ctx, (await self._network_views(s, [row]))[0])

    @staticmethod
    async def _check_one_default(s, network_id: str | None) -> None:
        """Neutron's rule: one default external network at a time (409 naming it)."""
        other = (await s.execute(select(Network.id).where(
            Network.external.is_(True), Network.is_default.is_(True), Network.id != (network_id or ""))
            .limit(1))).scalar()
        if other is not None:
            raise exceptions.DefaultExternalNetworkExists(net_id=other)

    async def delete_network(self, ctx: RequestContext, network_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self._network_row(s, ctx, network_id)
            check_owner(ctx, row.project_id, "delete_network")
            ports = (await s.execute(select(Port.id, Port.project_id, Port.device_owner)
                                     .where(Port.network_id == row.id))).all()
            # a router's interface or gateway, a floating IP: in use, as a guest's port is
            if any((owner or "") != "network:dhcp" for _, _, owner in ports):
                raise exceptions.NetworkInUse(net_id=row.id)
            for pid, project, _ in ports:  # the DHCP agents' ports go with the network
                await delete_port_rows(s, pid)
                await self.quotas.release(s, project, port=1)
            for sid, project in (await s.execute(select(Subnet.id, Subnet.project_id)
                                                 .where(Subnet.network_id == row.id))).all():
                await s.execute(delete(IPAllocation).where(IPAllocation.subnet_id == sid))
                await s.execute(delete(Subnet).where(Subnet.id == sid))
                await self.quotas.release(s, project, subnet=1)
            await s.execute(delete(Network).where(Network.id == row.id))
            await self.quotas.release(s, row.project_id, network=1)
            self.store.network_changed(s, ctx, "network_delete_end", row.id)

    # Subnets ----------------------------------------------------------------------------

    def _subnet_query(self, ctx: RequestContext):
        q = select(Subnet)
        if not ctx.is_admin:
            q = q.join(Network, Network.id == Subnet.network_id).where(or_(
                Subnet.project_id == ctx.project_id, Network.project_id == ctx.project_id,
                Network.shared.is_(True), Network.external.is_(True)))
        return q

    async def subnet_row(self, s, ctx: RequestContext, subnet_id: str) -> Subnet:
        """The subnet as an ORM object, if ``ctx`` sees it (SubnetNotFound otherwise)."""
        row = (await s.execute(self._subnet_query(ctx).where(Subnet.id == str(subnet_id)))).scalar_one_or_none()
        if row is None:
            raise exceptions.SubnetNotFound(subnet_id=subnet_id)
        return row

    @staticmethod
    def _subnet_view(row: Subnet) -> dict:
        return {
            "id": row.id, "name": row.name or "", "description": row.description or "",
            "project_id": row.project_id, "tenant_id": row.project_id, "network_id": row.network_id,
            "ip_version": row.ip_version, "cidr": row.cidr, "gateway_ip": row.gateway_ip,
            "enable_dhcp": bool(row.enable_dhcp), "allocation_pools": list(row.allocation_pools or []),
            "dns_nameservers": list(row.dns_nameservers or []), "host_routes": list(row.host_routes or []),
            "ipv6_ra_mode": row.ipv6_ra_mode, "ipv6_address_mode": row.ipv6_address_mode,
            "subnetpool_id": None, "service_types": [], "tags": [],
            "created_at": iso(row.created_at), "updated_at": iso(row.updated_at or row.created_at),
            "revision_number": row.revision_number or 0,
        }

    @staticmethod
    def _check_gateway(net, gateway: str | None) -> None:
        if gateway is None:
            return
        ip = ipaddress.ip_address(gateway)
        if ip.version != net.version:
            raise exceptions.InvalidInput(error_message=f"Gateway IP version inconsistent with subnet "
                                                        f"version {net.version}")
        if not ipam.usable_in_subnet(gateway, str(net)) or (
                net.version == 6 and ip == net.network_address and net.prefixlen < 127):
            raise exceptions.InvalidInput(error_message="Gateway is not valid on subnet")

    async def create_subnet_in(self, s, ctx: RequestContext, body: dict) -> dict:
        """``create_subnet`` inside the caller's transaction ``s``."""
        body = attrs.validate_body("subnet", body, create=True, is_admin=ctx.is_admin)
        network = await self._network_row(s, ctx, body["network_id"])
        if not ctx.is_admin and network.project_id != ctx.project_id:
            raise _not_owner("create_subnet and rule:admin_or_network_owner")
        project = project_for_create(ctx, body)
        net = ipam.network_of(body["cidr"])
        if net.version != body["ip_version"]:
            raise exceptions.InvalidInput(error_message=f"Cidr {body['cidr']} does not match ip_version "
                                                        f"{body['ip_version']}")
        if net.prefixlen == 0:
            raise exceptions.InvalidInput(error_message="0 is not allowed as CIDR prefix length")
        ra, am = body.get("ipv6_ra_mode"), body.get("ipv6_address_mode")
        if net.version == 4 and (ra or am):
            raise exceptions.InvalidInput(error_message="ipv6_ra_mode or ipv6_address_mode cannot be set "
                                                        "for an IPv4 subnet")
        if ra and am and ra != am:
            raise exceptions.InvalidInput(error_message=f"ipv6_ra_mode set to '{ra}' with "
                                                        f"ipv6_address_mode set to '{am}' is not valid")
        if (ra or am) and not body["enable_dhcp"]:
            raise exceptions.InvalidInput(error_message="ipv6_ra_mode or ipv6_address_mode cannot be set "
                                                        "when enable_dhcp is set to False")
        if am in ("slaac", "dhcpv6-stateless") and net.prefixlen != 64:
            raise exceptions.InvalidInput(error_message=f"Invalid CIDR {net} for IPv6 address mode. "
                                                        "OpenStack uses the EUI-64 address format, which "
                                                        "requires the prefix to be /64")
        existing = list((await s.execute(select(Subnet.cidr).where(Subnet.network_id == network.id))).scalars())
        if ipam.overlaps(str(net), existing):
            raise exceptions.InvalidInput(error_message=f"Requested subnet with cidr: {net} for network: "
                                                        f"{network.id} overlaps with another subnet")
        gateway = body["gateway_ip"] if "gateway_ip" in body else ipam.default_gateway(net)
        self._check_gateway(net, gateway)
        if "allocation_pools" in body:
            pools = ipam.check_pools(net, body["allocation_pools"], gateway)
        else:
            pools = ipam.default_pools(net, gateway)
        now = utcnow()
        row = Subnet(id=new_id(), network_id=network.id, project_id=project, name=body["name"],
                     description=body["description"], ip_version=net.version, cidr=str(net),
                     gateway_ip=gateway, enable_dhcp=body["enable_dhcp"], allocation_pools=pools,
                     dns_nameservers=body["dns_nameservers"], host_routes=body["host_routes"],
                     ipv6_ra_mode=ra, ipv6_address_mode=am, revision_number=0, created_at=now,
                     updated_at=now)
        s.add(row)
        network.revision_number = (network.revision_number or 0) + 1
        network.updated_at = now
        await s.flush()
        await self.quotas.consume(s, project, subnet=1)
        self.store.network_changed(s, ctx, "subnet_create_end", row.network_id)
        return self._subnet_view(row)

    async def create_subnet(self, ctx: RequestContext, subnet: dict) -> dict:
        async with self.store.transaction() as s:
            return await self.create_subnet_in(s, ctx, subnet)

    async def create_subnets(self, ctx: RequestContext, subnets: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self.create_subnet_in(s, ctx, n) for n in _bulk(subnets)]

    async def get_subnet(self, ctx: RequestContext, subnet_id: str, fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            row = (await s.execute(_subnets_statement(_visibility(ctx), ("id",)),
                                   {"f0": [str(subnet_id)], "b_project": ctx.project_id})).first()
        if row is None:
            raise exceptions.SubnetNotFound(subnet_id=subnet_id)
        return attrs.select_fields(self._subnet_view(row), fields)

    async def list_subnets(self, ctx: RequestContext, filters: dict | None = None,
                           fields: list[str] | None = None, sort_key=None, sort_dir=None,
                           limit: int | None = None, marker: str | None = None,
                           page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(SUBNET_FIELDS, _SUBNET_COLUMNS, filters=filters, sort_key=sort_key,
                                     sort_dir=sort_dir, limit=limit, marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_subnet(ctx, m))
        async with self.store.reader() as s:
            rows = (await s.execute(plan.statement(_subnets_statement(_visibility(ctx), ())),
                                    {"b_project": ctx.project_id})).all()
        return [attrs.select_fields(self._subnet_view(r), fields) for r in plan.in_order(rows)]

    async def subnets_of_networks(self, s, network_ids: list[str]) -> list[dict]:
        """Every subnet of ``network_ids`` (an admin's ``list_subnets``), within the session ``s``."""
        if not network_ids:
            return []
        rows = (await s.execute(_subnets_statement("admin", ("network_id",)), {"f0": list(network_ids)})).all()
        return [self._subnet_view(r) for r in rows]

    async def update_subnet(self, ctx: RequestContext, subnet_id: str, subnet: dict) -> dict:
        body = attrs.validate_body("subnet", subnet, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self.subnet_row(s, ctx, subnet_id)
            check_owner(ctx, row.project_id, "update_subnet")
            net = ipam.network_of(row.cidr)
            gateway = body.get("gateway_ip", row.gateway_ip)
            if "gateway_ip" in body:
                self._check_gateway(net, gateway)
                holder = (await s.execute(select(Port.device_owner).join(
                    IPAllocation, IPAllocation.port_id == Port.id).where(
                    IPAllocation.subnet_id == row.id, IPAllocation.ip_address == gateway))).first() if gateway else None
                if holder is not None and not may_hold_gateway(holder.device_owner):
                    raise exceptions.IpAddressInUse(net_id=row.network_id, ip_address=gateway)
            if "allocation_pools" in body:
                body["allocation_pools"] = ipam.check_pools(net, body["allocation_pools"], gateway)
            elif "gateway_ip" in body:
                ipam.check_pools(net, row.allocation_pools or [], gateway)
            for key, value in body.items():
                setattr(row, key, value)
            if body:
                row.revision_number = (row.revision_number or 0) + 1
                row.updated_at = utcnow()
            await s.flush()
            self.store.network_changed(s, ctx, "subnet_update_end", row.network_id)
            return self._subnet_view(row)

    async def delete_subnet(self, ctx: RequestContext, subnet_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self.subnet_row(s, ctx, subnet_id)
            check_owner(ctx, row.project_id, "delete_subnet")
            owners = (await s.execute(select(Port.device_owner).join(
                IPAllocation, IPAllocation.port_id == Port.id).where(IPAllocation.subnet_id == row.id))).scalars()
            if any((o or "") != "network:dhcp" for o in owners):  # a router interface too
                raise exceptions.SubnetInUse(subnet_id=row.id)
            await s.execute(delete(IPAllocation).where(IPAllocation.subnet_id == row.id))
            await s.execute(delete(Subnet).where(Subnet.id == row.id))
            await s.execute(update(Network).where(Network.id == row.network_id).values(
                revision_number=Network.revision_number + 1, updated_at=utcnow()))
            await self.quotas.release(s, row.project_id, subnet=1)
            self.store.network_changed(s, ctx, "subnet_delete_end", row.network_id)

