"""Routers (Neutron's ``router``, ``ext-gw-mode`` and ``extraroute``), one service of the network
manager.

``Routers`` serves their part of the bus and of the Networking API, and the L3 agents' sync
(``nefos.control.network.l3_rpc``); it makes and removes its ports through ``Ports`` and finds subnets
through ``Networks``. A router is a
row of ``routers``; everything it connects is a port: an interface is a port on a tenant subnet
holding that subnet's gateway IP (``device_owner`` ``network:router_interface``, ``device_id``
the router, the router's project), its gateway a port on an external network
(``network:router_gateway``, no project, as in Neutron). So the invariants are the ports':
a subnet's gateway IP is held by at most one interface (the ``ipallocations`` primary key:
two routers racing for one subnet, one of them gets ``IpAddressInUse``), and a router's
interfaces and gateway go with it or keep it (``RouterInUse``).

Every change that alters what an L3 agent configures (``nefos.agents.l3_agent``) marks the
router changed in its transaction (``NetworkStore.router_changed``); once committed, the router change
listeners hear of it (``nefos.control.network.l3_rpc.L3AgentNotifier`` fans it out to the agents).
"""

from __future__ import annotations

import ipaddress
import logging

from sqlalchemy import delete, func, or_, select, union_all, update

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import FloatingIP, IPAllocation, Network, Port, Router, RouterPort, Subnet, utcnow
from nefos.control.network import attributes as attrs
from nefos.control.network import ipam, list_query, schemas
from nefos.control.network.common import (
    bulk as _bulk, check_owner, iso, new_id, not_owner as _not_owner, project_for_create,
)
from nefos.control.network.network_rows import network_brief
from nefos.control.network.networks import Networks
from nefos.control.network.ports import ROUTER_GATEWAY_OWNER, ROUTER_INTERFACE_OWNER, Ports, delete_port_rows
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.store import NetworkStore

LOG = logging.getLogger(__name__)

ROUTER_FIELDS = schemas.fields("router")
# The view's fields in SQL (``list_query``), as ``_router_view`` shows them.
_ROUTER_COLUMNS = {
    "id": Router.id, "name": func.coalesce(Router.name, ""), "description": func.coalesce(Router.description, ""),
    "project_id": Router.project_id, "admin_state_up": func.coalesce(Router.admin_state_up, False),
    "status": func.coalesce(Router.status, "ACTIVE"), "availability_zone_hints": list_query.Fixed([]),
    "availability_zones": list_query.Fixed(["nova"]), "tags": list_query.Fixed([]),
    "revision_number": func.coalesce(Router.revision_number, 0),
}


def service_context() -> RequestContext:
    """The service acting for itself (the ports a router or floating IP owns have no project)."""
    return RequestContext(is_admin=True)


def _one_of(body, action: str) -> tuple[str | None, str | None]:
    """``{"subnet_id": ...}`` or ``{"port_id": ...}`` of add/remove_router_interface."""
    if not isinstance(body, dict):
        raise attrs.bad_request("Body contains invalid data")
    unknown = sorted(set(body) - {"subnet_id", "port_id"})
    if unknown:
        raise attrs.bad_request(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    subnet_id, port_id = body.get("subnet_id"), body.get("port_id")
    if subnet_id is not None and port_id is not None and action == "add":
        raise exceptions.BadRequest(resource="router", msg="Cannot specify both subnet-id and port-id")
    if subnet_id is None and port_id is None:
        raise exceptions.BadRequest(resource="router", msg="Either subnet_id or port_id must be specified")
    return (attrs.v_uuid(subnet_id, "subnet_id") if subnet_id is not None else None,
            attrs.v_uuid(port_id, "port_id") if port_id is not None else None)


class Routers:
    """Routers and their interfaces: their part of the bus and of the Networking API, and what
    the L3 agents configure."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas, networks: Networks, ports: Ports):
        self.store = store
        self.quotas = quotas
        self.networks = networks
        self.ports = ports

    # Rows and views -----------------------------------------------------------------------------

    @staticmethod
    def _router_visible(ctx: RequestContext):
        if ctx.is_admin:
            return None
        return Router.project_id == ctx.project_id if ctx.project_id else Router.project_id.is_(None)

    async def _router_row(self, s, ctx: RequestContext, router_id: str) -> Router:
        q = select(Router).where(Router.id == str(router_id))
        cond = self._router_visible(ctx)
        if cond is not None:
            q = q.where(cond)
        row = (await s.execute(q)).scalar_one_or_none()
        if row is None:
            raise exceptions.RouterNotFound(router_id=router_id)
        return row

    @staticmethod
    def _router_view(row: Router, gw_ips: list[dict]) -> dict:
        info = None
        if row.gw_network_id:
            info = {"network_id": row.gw_network_id, "enable_snat": bool(row.enable_snat),
                    "external_fixed_ips": gw_ips}
        return {
            "id": row.id, "name": row.name or "", "description": row.description or "",
            "project_id": row.project_id, "tenant_id": row.project_id,
            "admin_state_up": bool(row.admin_state_up), "status": row.status or "ACTIVE",
            "external_gateway_info": info, "routes": list(row.routes or []),
            "availability_zone_hints": [], "availability_zones": ["nova"], "tags": [],
            "created_at": iso(row.created_at), "updated_at": iso(row.updated_at or row.created_at),
            "revision_number": row.revision_number or 0,
        }

    async def _router_views(self, s, rows: list[Router]) -> list[dict]:
        gw_ports = [r.gw_port_id for r in rows if r.gw_port_id]
        ips: dict[str, list[dict]] = {}
        if gw_ports:
            for port_id, sid, ip in (await s.execute(
                    select(IPAllocation.port_id, IPAllocation.subnet_id, IPAllocation.ip_address)
                    .where(IPAllocation.port_id.in_(gw_ports)).order_by(IPAllocation.ip_address))).all():
                ips.setdefault(port_id, []).append({"subnet_id": sid, "ip_address": ip})
        return [self._router_view(r, ips.get(r.gw_port_id, [])) for r in rows]

    async def _router_interfaces(self, s, router_id: str) -> list[dict]:
        """The router's interfaces: port, network, subnet, address, subnet CIDR (one per address).
        Those the router API attached (``routerports``), whatever other ports claim to be its."""
        rows = (await s.execute(
            select(Port.id, Port.network_id, IPAllocation.subnet_id, IPAllocation.ip_address, Subnet.cidr)
            .join(RouterPort, RouterPort.port_id == Port.id)
            .join(IPAllocation, IPAllocation.port_id == Port.id).join(Subnet, Subnet.id == IPAllocation.subnet_id)
            .where(RouterPort.router_id == router_id)
            .order_by(Port.created_at, Port.id))).all()
        return [{"port_id": p, "network_id": n, "subnet_id": sid, "ip_address": ip, "cidr": cidr}
                for p, n, sid, ip, cidr in rows]

    # Gateway --------------------------------------------------------------------------------------

    async def _set_gateway(self, s, ctx: RequestContext, row: Router, info: dict | None, action: str) -> None:
        if info is not None and not ctx.is_admin:
            for key in ("enable_snat", "external_fixed_ips"):  # Neutron's defaults: the admin's
                if key in info:
                    raise _not_owner(f"{action}:external_gateway_info:{key}")
        same_network = info is not None and info["network_id"] == row.gw_network_id
        if same_network and "external_fixed_ips" not in info:
            row.enable_snat = info.get("enable_snat", bool(row.enable_snat))
            return
        if row.gw_port_id:  # removed or replaced: not while floating IPs reach guests through it
            used = (await s.execute(select(FloatingIP.id).where(FloatingIP.router_id == row.id).limit(1))).first()
            if used is not None:
                raise exceptions.RouterExternalGatewayInUseByFloatingIp(router_id=row.id, net_id=row.gw_network_id)
            await delete_port_rows(s, row.gw_port_id)
            self.store.network_changed(s, ctx, "port_delete_end", row.gw_network_id)
            row.gw_port_id, row.gw_network_id, row.enable_snat = None, None, True
        if info is None:
            return
        network = await network_brief(s, ctx, info["network_id"])
        if not network.external:
            raise exceptions.BadRequest(resource="router",
                                        msg=f"Network {network.id} is not a valid external network")
        body = {"network_id": network.id, "device_owner": ROUTER_GATEWAY_OWNER, "device_id": row.id,
                "port_security_enabled": False}
        if info.get("external_fixed_ips"):
            body["fixed_ips"] = info["external_fixed_ips"]
        port = await self.ports.create_port_in(s, service_context(), body)
        if not port["fixed_ips"]:
            raise exceptions.BadRequest(resource="router",
                                        msg=f"No IPs available for external network {network.id}")
        row.gw_port_id, row.gw_network_id = port["id"], network.id
        row.enable_snat = info.get("enable_snat", True)

    # Routes (extraroute) ---------------------------------------------------------------------------

    async def _check_routes(self, s, row: Router, routes: list[dict]) -> None:
        """Each nexthop must be on a subnet the router is on, and not the router itself."""
        own = {i["ip_address"]: i["cidr"] for i in await self._router_interfaces(s, row.id)}
        if row.gw_port_id:
            for ip, cidr in (await s.execute(select(IPAllocation.ip_address, Subnet.cidr).join(
                    Subnet, Subnet.id == IPAllocation.subnet_id).where(IPAllocation.port_id == row.gw_port_id))).all():
                own[ip] = cidr
        for route in routes:
            hop = route["nexthop"]
            if hop in own:
                raise exceptions.InvalidRoutes(routes=routes, reason=f"the nexthop is used by router")
            if not any(ipaddress.ip_address(hop) in ipaddress.ip_network(c) for c in own.values()):
                raise exceptions.InvalidRoutes(routes=routes, reason="the nexthop is not connected with router")

    # CRUD ------------------------------------------------------------------------------------------

    async def create_router_in(self, s, ctx: RequestContext, body: dict) -> dict:
        """``create_router`` inside the caller's transaction ``s``."""
        body = attrs.validate_body("router", body, create=True, is_admin=ctx.is_admin)
        project = project_for_create(ctx, body)
        now = utcnow()
        row = Router(id=new_id(), project_id=project, name=body["name"], description=body["description"],
                     admin_state_up=body["admin_state_up"], status="ACTIVE", enable_snat=True, routes=[],
                     revision_number=0, created_at=now, updated_at=now)
        s.add(row)
        await s.flush()
        await self.quotas.consume(s, project, router=1)
        await self._set_gateway(s, ctx, row, body["external_gateway_info"], "create_router")
        await s.flush()
        self.store.router_changed(s, ctx, row.id)
        return (await self._router_views(s, [row]))[0]

    async def create_router(self, ctx: RequestContext, router: dict) -> dict:
        async with self.store.transaction() as s:
            return await self.create_router_in(s, ctx, router)

    async def create_routers(self, ctx: RequestContext, routers: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self.create_router_in(s, ctx, r) for r in _bulk(routers)]

    async def get_router(self, ctx: RequestContext, router_id: str, fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            row = await self._router_row(s, ctx, router_id)
            return attrs.select_fields((await self._router_views(s, [row]))[0], fields)

    async def list_routers(self, ctx: RequestContext, filters: dict | None = None,
                           fields: list[str] | None = None, sort_key=None, sort_dir=None,
                           limit: int | None = None, marker: str | None = None,
                           page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(ROUTER_FIELDS, _ROUTER_COLUMNS, filters=filters, sort_key=sort_key,
                                     sort_dir=sort_dir, limit=limit, marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_router(ctx, m))
        q = select(Router)
        cond = self._router_visible(ctx)
        if cond is not None:
            q = q.where(cond)
        async with self.store.reader() as s:
            rows = plan.in_order((await s.execute(plan.statement(q))).scalars().all())
            docs = await self._router_views(s, rows)
        return [attrs.select_fields(d, fields) for d in docs]

    async def update_router(self, ctx: RequestContext, router_id: str, router: dict) -> dict:
        body = attrs.validate_body("router", router, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self._router_row(s, ctx, router_id)
            check_owner(ctx, row.project_id, "update_router")
            if "external_gateway_info" in body:
                await self._set_gateway(s, ctx, row, body.pop("external_gateway_info"), "update_router")
            if "routes" in body:
                await self._check_routes(s, row, body["routes"])
            for key, value in body.items():
                setattr(row, key, value)
            row.revision_number = (row.revision_number or 0) + 1
            row.updated_at = utcnow()
            await s.flush()
            self.store.router_changed(s, ctx, row.id)
            return (await self._router_views(s, [row]))[0]

    async def delete_router(self, ctx: RequestContext, router_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self._router_row(s, ctx, router_id)
            check_owner(ctx, row.project_id, "delete_router")
            if await self._router_interfaces(s, row.id):
                raise exceptions.RouterInUse(router_id=row.id, reason="still has ports")
            await self._set_gateway(s, ctx, row, None, "delete_router")
            await s.execute(delete(Router).where(Router.id == row.id))
            await self.quotas.release(s, row.project_id, router=1)
            self.store.router_changed(s, ctx, row.id)

    # Interfaces ------------------------------------------------------------------------------------

    @staticmethod
    def _interface_info(row: Router, port_id: str, network_id: str, subnet_ids: list[str]) -> dict:
        return {"id": row.id, "tenant_id": row.project_id, "project_id": row.project_id, "port_id": port_id,
                "network_id": network_id, "subnet_id": subnet_ids[0] if subnet_ids else None,
                "subnet_ids": subnet_ids}

    @staticmethod
    def _check_overlaps(existing: list[dict], subnets: list[tuple[str, str]]) -> None:
        for sid, cidr in subnets:
            for other in existing:
                if other["subnet_id"] == sid:
                    raise exceptions.BadRequest(resource="router", msg=f"Router already has a port on subnet {sid}")
                if ipam.overlaps(cidr, [other["cidr"]]):
                    raise exceptions.BadRequest(
                        resource="router", msg=f"Cidr {cidr} of subnet {sid} overlaps with cidr {other['cidr']} "
                                               f"of subnet {other['subnet_id']}")

    @staticmethod
    def _check_subnet_owned(ctx: RequestContext, subnet_id: str, subnet_project: str | None) -> None:
        """A project plugs its router only into its own subnets: on another project's (a shared
        network's) it would take the gateway address and steer that network (Neutron's check in
        ``_add_interface_by_subnet``, its message; here by port too)."""
        if not ctx.is_admin and subnet_project != ctx.project_id:
            raise exceptions.BadRequest(resource="router", msg=(
                f"Cannot add interface to router because subnet {subnet_id} is not owned by project "
                "making the request"))

    async def add_router_interface(self, ctx: RequestContext, router_id: str, interface_info: dict) -> dict:
        subnet_id, port_id = _one_of(interface_info, "add")
        async with self.store.transaction() as s:
            return await self.add_router_interface_in(s, ctx, router_id, subnet_id, port_id)

    async def add_router_interface_in(self, s, ctx: RequestContext, router_id: str, subnet_id: str | None,
                                      port_id: str | None) -> dict:
        """Inside the caller's transaction (the auto-allocated topology builds in one)."""
        row = await self._router_row(s, ctx, router_id)
        check_owner(ctx, row.project_id, "add_router_interface")
        existing = await self._router_interfaces(s, row.id)
        if port_id is not None:
            port = await self.ports.port_row(s, ctx, port_id)
            if port.device_id or port.device_owner:
                raise exceptions.PortInUse(
                    f"Unable to complete operation on port {port.id} for network {port.network_id}. "
                    f"Port already has an attached device {port.device_id}.", port_id=port.id)
            if not ctx.is_admin and port.project_id != row.project_id:
                # the network's owner sees other projects' ports on it: not its router's to take
                raise exceptions.BadRequest(resource="router", msg=(
                    f"Cannot add interface to router because port {port.id} is not owned by project "
                    "making the request"))
            subnets = (await s.execute(select(Subnet.id, Subnet.cidr, Subnet.project_id).join(
                IPAllocation, IPAllocation.subnet_id == Subnet.id).where(IPAllocation.port_id == port.id))).all()
            if not subnets:
                raise exceptions.BadRequest(resource="router", msg="Router port must have at least one fixed IP")
            for sid, _, subnet_project in subnets:
                self._check_subnet_owned(ctx, sid, subnet_project)
            self._check_overlaps(existing, [(sid, cidr) for sid, cidr, _ in subnets])
            await s.execute(update(Port).where(Port.id == port.id).values(
                device_id=row.id, device_owner=ROUTER_INTERFACE_OWNER, updated_at=utcnow(),
                revision_number=Port.revision_number + 1))
            network_id, subnet_ids = port.network_id, [sid for sid, _, _ in subnets]
            self.store.network_changed(s, ctx, "port_update_end", network_id)
        else:
            subnet = await self.networks.subnet_row(s, ctx, subnet_id)
            if not subnet.gateway_ip:
                raise exceptions.BadRequest(resource="router",
                                            msg="Subnet for router interface must have a gateway IP")
            self._check_subnet_owned(ctx, subnet.id, subnet.project_id)
            external = (await s.execute(select(Network.external).where(
                Network.id == subnet.network_id))).scalar_one()
            if external:
                raise exceptions.BadRequest(resource="router", msg=f"Subnet {subnet.id} is on an external "
                                                                    "network: it is a gateway, not an interface")
            self._check_overlaps(existing, [(subnet.id, subnet.cidr)])
            port = await self.ports.create_port_in(s, service_context(), {
                "network_id": subnet.network_id, "device_owner": ROUTER_INTERFACE_OWNER, "device_id": row.id,
                "project_id": row.project_id, "port_security_enabled": False,
                "fixed_ips": [{"subnet_id": subnet.id, "ip_address": subnet.gateway_ip}]})
            port_id, network_id, subnet_ids = port["id"], subnet.network_id, [subnet.id]
        s.add(RouterPort(port_id=port_id, router_id=row.id, port_type=ROUTER_INTERFACE_OWNER))
        row.revision_number = (row.revision_number or 0) + 1
        row.updated_at = utcnow()
        self.store.router_changed(s, ctx, row.id)
        return self._interface_info(row, port_id, network_id, subnet_ids)

    async def remove_router_interface(self, ctx: RequestContext, router_id: str, interface_info: dict) -> dict:
        subnet_id, port_id = _one_of(interface_info, "remove")
        async with self.store.transaction() as s:
            row = await self._router_row(s, ctx, router_id)
            check_owner(ctx, row.project_id, "remove_router_interface")
            interfaces = await self._router_interfaces(s, row.id)
            if port_id is not None:
                mine = [i for i in interfaces if i["port_id"] == port_id]
                if not mine:
                    raise exceptions.RouterInterfaceNotFound(router_id=row.id, port_id=port_id)
                if subnet_id is not None and not any(i["subnet_id"] == subnet_id for i in mine):
                    raise exceptions.SubnetNotFound(subnet_id=subnet_id)  # Neutron: the port is not on it
            else:
                await self.networks.subnet_row(s, ctx, subnet_id)  # 404 for a subnet the caller cannot see
                on_subnet = {i["port_id"] for i in interfaces if i["subnet_id"] == subnet_id}
                if not on_subnet:
                    raise exceptions.RouterInterfaceNotFoundForSubnet(router_id=row.id, subnet_id=subnet_id)
                port_id = next(iter(on_subnet))
                mine = [i for i in interfaces if i["port_id"] == port_id]
            for i in mine:  # floating IPs reach their guests through this interface
                used = (await s.execute(select(FloatingIP.id).join(IPAllocation, (
                    IPAllocation.port_id == FloatingIP.fixed_port_id) & (
                    IPAllocation.ip_address == FloatingIP.fixed_ip_address)).where(
                    FloatingIP.router_id == row.id, IPAllocation.subnet_id == i["subnet_id"]).limit(1))).first()
                if used is not None:
                    raise exceptions.RouterInterfaceInUseByFloatingIP(router_id=row.id, subnet_id=i["subnet_id"])
            project = (await s.execute(select(Port.project_id).where(Port.id == port_id))).scalar_one()
            await delete_port_rows(s, port_id)
            await self.quotas.release(s, project, port=1)
            self.store.network_changed(s, ctx, "port_delete_end", mine[0]["network_id"])
            row.revision_number = (row.revision_number or 0) + 1
            row.updated_at = utcnow()
            self.store.router_changed(s, ctx, row.id)
            return self._interface_info(row, port_id, mine[0]["network_id"], [i["subnet_id"] for i in mine])

    # For the L3 agents (served by nefos.control.network.l3_rpc, not on the network topic) --------------------

    async def bind_router_ports(self, host: str, router_ids: list[str] | None = None) -> list[str]:
        """Bind the interface and gateway ports of ``router_ids`` (None: every router) to ``host``,
        the L3 agent's that serves them, as Neutron's L3 RPC does for a legacy router's ports:
        that host's L2 agent reports their devices, and L2 population gives the other hosts the
        forwarding and ARP entries of the router's MACs and addresses (and that host the guests').
        Every L3 agent serves every router, so the last to sync one holds its ports (a cloud
        runs one). Returns the ports bound now."""
        async with self.store.reader() as s:
            # the routers' own ports (their interfaces and gateways), not look-alikes naming them
            held = union_all(select(RouterPort.port_id.label("port_id"), RouterPort.router_id.label("router_id")),
                             select(Router.gw_port_id, Router.id).where(Router.gw_port_id.is_not(None))).subquery()
            q = select(Port.id).join(held, held.c.port_id == Port.id).where(
                or_(Port.binding_host_id.is_(None), Port.binding_host_id != host))
            if router_ids is not None:
                q = q.where(held.c.router_id.in_(list(router_ids)))
            port_ids = list((await s.execute(q.order_by(Port.id))).scalars())
        bound = []
        for port_id in port_ids:
            try:  # the port's own update: provisioning, port events and L2 population's fanout with it
                await self.ports.update_port(service_context(), port_id, {"binding:host_id": host})
            except exceptions.PortNotFound:
                continue  # the interface went meanwhile
            bound.append(port_id)
        if bound:
            LOG.info("router port(s) %s bound to %s (its L3 agent)", bound, host)
        return bound

    async def routers_for_agent(self, router_ids: list[str] | None = None, host: str | None = None) -> list[dict]:
        """What an L3 agent configures for each router (every router when ``router_ids`` is None;
        a router asked for and not returned is gone). With ``host`` (the agent's), only the ports
        bound there: one added after ``bind_router_ports`` looked comes with the next sync, bound,
        so the host's L2 agent never sees the device of a port not bound to it."""
        async with self.store.reader() as s:
            q = select(Router)
            if router_ids is not None:
                q = q.where(Router.id.in_(list(router_ids)))
            rows = list((await s.execute(q)).scalars())
            out = []
            for row in rows:
                doc = {"id": row.id, "admin_state_up": bool(row.admin_state_up),
                       "enable_snat": bool(row.enable_snat), "routes": list(row.routes or []),
                       "gateway": None, "interfaces": [], "floating_ips": []}
                ports = {pid: (mac, bound) for pid, mac, bound in (await s.execute(select(
                    Port.id, Port.mac_address, Port.binding_host_id).where(Port.device_id == row.id))).all()}
                macs = {pid: mac for pid, (mac, _) in ports.items()}
                here = {pid for pid, (_, bound) in ports.items() if host is None or bound == host}
                for i in await self._router_interfaces(s, row.id):
                    if ipaddress.ip_network(i["cidr"]).version != 4 or i["port_id"] not in here:
                        continue
                    doc["interfaces"].append({**i, "mac_address": macs.get(i["port_id"]),
                                              "prefixlen": ipaddress.ip_network(i["cidr"]).prefixlen})
                if row.gw_port_id and row.gw_port_id in here:
                    gw = (await s.execute(select(IPAllocation.ip_address, Subnet.cidr, Subnet.gateway_ip).join(
                        Subnet, Subnet.id == IPAllocation.subnet_id).where(
                        IPAllocation.port_id == row.gw_port_id, Subnet.ip_version == 4))).first()
                    if gw is not None:
                        doc["gateway"] = {"port_id": row.gw_port_id, "network_id": row.gw_network_id,
                                          "mac_address": macs.get(row.gw_port_id), "ip_address": gw[0],
                                          "cidr": gw[1], "prefixlen": ipaddress.ip_network(gw[1]).prefixlen,
                                          "subnet_gateway_ip": gw[2]}
                for fid, fip, fixed in (await s.execute(select(
                        FloatingIP.id, FloatingIP.floating_ip_address, FloatingIP.fixed_ip_address).where(
                        FloatingIP.router_id == row.id, FloatingIP.fixed_ip_address.is_not(None))
                        .order_by(FloatingIP.floating_ip_address))).all():
                    doc["floating_ips"].append({"id": fid, "floating_ip_address": fip, "fixed_ip_address": fixed})
                out.append(doc)
        return out
