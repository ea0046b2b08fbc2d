"""Floating IPs (Neutron's ``floatingip`` of the ``router`` extension), one service of the network
manager.

``FloatingIPs`` serves their part of the bus and of the Networking API. A floating IP holds an
address of the external network through a port of its own, made by ``Ports`` (``device_owner``
``network:floatingip``, ``device_id`` the floating IP, no project: the address is unique by
the ``ipallocations`` primary key). Associated, it names a fixed address of a port and the
router that reaches that port's subnet with a gateway on the floating IP's network (found when
associating: ``ExternalGatewayForFloatingIPNotFound`` when there is none). A fixed address has
at most one floating IP per external network (a unique key). It counts against the project's
``floatingip`` quota. Deleting the fixed port disassociates it (``Ports.delete_port``).
"""

from __future__ import annotations

import ipaddress

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import FloatingIP, IPAllocation, Port, Router, RouterPort, utcnow
from nefos.control.network import attributes as attrs
from nefos.control.network import list_query, schemas
from nefos.control.network.common import bulk as _bulk, check_owner, iso, new_id, project_for_create
from nefos.control.network.network_rows import network_brief
from nefos.control.network.ports import FLOATINGIP_OWNER, Ports, delete_port_rows
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.routers import service_context
from nefos.control.network.store import NetworkStore

FLOATINGIP_FIELDS = schemas.fields("floatingip")
# The view's fields in SQL (``list_query``), as ``_fip_view`` shows them.
_FIP_COLUMNS = {
    "id": FloatingIP.id, "project_id": FloatingIP.project_id,
    "description": func.coalesce(FloatingIP.description, ""),
    "floating_ip_address": FloatingIP.floating_ip_address, "floating_network_id": FloatingIP.floating_network_id,
    "router_id": FloatingIP.router_id, "port_id": FloatingIP.fixed_port_id,
    "fixed_ip_address": FloatingIP.fixed_ip_address, "status": func.coalesce(FloatingIP.status, "DOWN"),
    "tags": list_query.Fixed([]), "revision_number": func.coalesce(FloatingIP.revision_number, 0),
}


class FloatingIPs:
    """Floating IPs: their part of the bus and of the Networking API."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas, ports: Ports):
        self.store = store
        self.quotas = quotas
        self.ports = ports

    @staticmethod
    def _fip_visible(ctx: RequestContext):
        if ctx.is_admin:
            return None
        return FloatingIP.project_id == ctx.project_id if ctx.project_id else FloatingIP.project_id.is_(None)

    async def _fip_row(self, s, ctx: RequestContext, fip_id: str) -> FloatingIP:
        q = select(FloatingIP).where(FloatingIP.id == str(fip_id))
        cond = self._fip_visible(ctx)
        if cond is not None:
            q = q.where(cond)
        row = (await s.execute(q)).scalar_one_or_none()
        if row is None:
            raise exceptions.FloatingIPNotFound(floatingip_id=fip_id)
        return row

    @staticmethod
    def _fip_view(row: FloatingIP) -> dict:
        return {
            "id": row.id, "project_id": row.project_id, "tenant_id": row.project_id,
            "description": row.description or "", "floating_ip_address": row.floating_ip_address,
            "floating_network_id": row.floating_network_id, "router_id": row.router_id,
            "port_id": row.fixed_port_id, "fixed_ip_address": row.fixed_ip_address,
            "status": row.status or "DOWN", "tags": [], "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at or row.created_at), "revision_number": row.revision_number or 0,
        }

    async def _associate(self, s, ctx: RequestContext, row: FloatingIP, port_id: str, fixed_ip: str | None) -> None:
        """Point ``row`` at ``fixed_ip`` (or the only IPv4 address) of ``port_id`` through the router
        that connects that address's subnet to the floating IP's network."""
        port = await self.ports.port_row(s, ctx, port_id)
        if not ctx.is_admin and port.project_id != row.project_id:
            raise exceptions.BadRequest(resource="floatingip", msg=(
                f"Cannot create floating IP and bind it to Port {port.id}, since that port is owned by a "
                "different tenant"))
        if (port.device_owner or "").startswith("network:"):
            raise exceptions.BadRequest(resource="floatingip", msg=(
                f"Port {port.id} has owner {port.device_owner} and therefore cannot be associated with a "
                "floating IP"))
        ips = [(sid, ip) for sid, ip in (await s.execute(select(IPAllocation.subnet_id, IPAllocation.ip_address)
                                                         .where(IPAllocation.port_id == port.id))).all()
               if ipaddress.ip_address(ip).version == 4]
        if fixed_ip is not None:
            ips = [(sid, ip) for sid, ip in ips if ip == fixed_ip]
            if not ips:
                raise exceptions.BadRequest(resource="floatingip",
                                            msg=f"Port {port.id} does not have fixed ip {fixed_ip}")
        elif not ips:
            raise exceptions.BadRequest(resource="floatingip", msg=(
                f"Unable to find any IP address on external network {row.floating_network_id} for port "
                f"{port.id}: it has no IPv4 address"))
        elif len(ips) > 1:
            raise exceptions.BadRequest(resource="floatingip", msg=(
                f"Port {port.id} has multiple fixed IPv4 addresses. Must provide a specific IPv4 address when "
                "assigning a floating IP"))
        subnet_id, address = ips[0]
        router_id = (await s.execute(
            select(Router.id).join(RouterPort, RouterPort.router_id == Router.id)
            .join(IPAllocation, IPAllocation.port_id == RouterPort.port_id)
            .where(IPAllocation.subnet_id == subnet_id, Router.gw_network_id == row.floating_network_id)
            .order_by(Router.created_at, Router.id).limit(1))).scalar_one_or_none()
        if router_id is None:
            raise exceptions.ExternalGatewayForFloatingIPNotFound(
                external_network_id=row.floating_network_id, subnet_id=subnet_id, port_id=port.id)
        taken = (await s.execute(select(FloatingIP.id, FloatingIP.floating_ip_address).where(
            FloatingIP.floating_network_id == row.floating_network_id, FloatingIP.fixed_port_id == port.id,
            FloatingIP.fixed_ip_address == address, FloatingIP.id != row.id))).first()
        if taken is not None:
            raise exceptions.FloatingIPPortAlreadyAssociated(
                floating_ip_address=row.floating_ip_address, fip_id=row.id, port_id=port.id, fixed_ip=address,
                net_id=row.floating_network_id)
        row.fixed_port_id, row.fixed_ip_address, row.router_id, row.status = port.id, address, router_id, "ACTIVE"
        try:
            async with s.begin_nested():
                await s.flush()
        except IntegrityError:  # a concurrent association of the same address won (the unique key)
            raise exceptions.FloatingIPPortAlreadyAssociated(
                floating_ip_address=row.floating_ip_address, fip_id=row.id, port_id=port.id, fixed_ip=address,
                net_id=row.floating_network_id) from None
        self.store.router_changed(s, ctx, router_id)
        await self._floating_ips_changed(s, ctx, port, [], [row.floating_ip_address])

    async def _disassociate(self, s, ctx: RequestContext, row: FloatingIP) -> None:
        self.store.router_changed(s, ctx, row.router_id)
        port = (await s.execute(select(Port).where(Port.id == row.fixed_port_id))).scalar_one_or_none()
        row.fixed_port_id = row.fixed_ip_address = row.router_id = None
        row.status = "DOWN"
        await self._floating_ips_changed(s, ctx, port, [row.floating_ip_address], [])

    async def _floating_ips_changed(self, s, ctx: RequestContext, port: Port | None, had: list[str],
                                    has: list[str]) -> None:
        """The port change hooks hear that ``port`` went from the floating addresses ``had`` to ``has``
        (its server's addresses changed: Neutron's ``network-changed`` to Nova)."""
        view = None if port is None else await self.ports.view_for_hooks(s, port)
        if view is not None:
            await self.store.port_changed(s, ctx, dict(view, floating_ips=had), dict(view, floating_ips=has))

    async def _create_floatingip(self, s, ctx: RequestContext, body: dict) -> dict:
        body = attrs.validate_body("floatingip", body, create=True, is_admin=ctx.is_admin)
        project = project_for_create(ctx, body)
        network = await network_brief(s, ctx, body["floating_network_id"])
        if not network.external:
            raise exceptions.BadRequest(resource="floatingip",
                                        msg=f"Network {network.id} is not a valid external network")
        fip_id = new_id()
        fixed: dict = {}
        if body.get("subnet_id"):
            fixed["subnet_id"] = body["subnet_id"]
        if body.get("floating_ip_address"):
            fixed["ip_address"] = body["floating_ip_address"]
        port_body = {"network_id": network.id, "device_owner": FLOATINGIP_OWNER, "device_id": fip_id,
                     "port_security_enabled": False}
        if fixed:
            port_body["fixed_ips"] = [fixed]
        port = await self.ports.create_port_in(s, service_context(), port_body)
        v4 = [f for f in port["fixed_ips"] if ipaddress.ip_address(f["ip_address"]).version == 4]
        if not v4:
            raise exceptions.BadRequest(resource="floatingip",
                                        msg=f"Network {network.id} does not contain any IPv4 subnet")
        now = utcnow()
        row = FloatingIP(id=fip_id, project_id=project, description=body["description"],
                         floating_network_id=network.id, floating_ip_address=v4[0]["ip_address"],
                         floating_port_id=port["id"], status="DOWN", revision_number=0, created_at=now,
                         updated_at=now)
        s.add(row)
        await s.flush()
        await self.quotas.consume(s, project, floatingip=1)
        if body.get("port_id"):
            await self._associate(s, ctx, row, body["port_id"], body.get("fixed_ip_address"))
        return self._fip_view(row)

    async def create_floatingip(self, ctx: RequestContext, floatingip: dict) -> dict:
        async with self.store.transaction() as s:
            return await self._create_floatingip(s, ctx, floatingip)

    async def create_floatingips(self, ctx: RequestContext, floatingips: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self._create_floatingip(s, ctx, f) for f in _bulk(floatingips)]

    async def get_floatingip(self, ctx: RequestContext, floatingip_id: str, fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            return attrs.select_fields(self._fip_view(await self._fip_row(s, ctx, floatingip_id)), fields)

    async def list_floatingips(self, ctx: RequestContext, filters: dict | None = None,
                               fields: list[str] | None = None, sort_key=None, sort_dir=None,
                               limit: int | None = None, marker: str | None = None,
                               page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(FLOATINGIP_FIELDS, _FIP_COLUMNS, filters=filters, sort_key=sort_key,
                                     sort_dir=sort_dir, limit=limit, marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_floatingip(ctx, m))
        q = select(FloatingIP)
        cond = self._fip_visible(ctx)
        if cond is not None:
            q = q.where(cond)
        async with self.store.reader() as s:
            rows = plan.in_order((await s.execute(plan.statement(q))).scalars().all())
        return [attrs.select_fields(self._fip_view(r), fields) for r in rows]

    async def update_floatingip(self, ctx: RequestContext, floatingip_id: str, floatingip: dict) -> dict:
        body = attrs.validate_body("floatingip", floatingip, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self._fip_row(s, ctx, floatingip_id)
            check_owner(ctx, row.project_id, "update_floatingip")
            if "description" in body:
                row.description = body["description"]
            if "port_id" in body or "fixed_ip_address" in body:
                port_id = body.get("port_id", row.fixed_port_id)
                if row.router_id:
                    await self._disassociate(s, ctx, row)
                    await s.flush()
                if port_id is not None:
                    await self._associate(s, ctx, row, port_id, body.get("fixed_ip_address"))
            row.revision_number = (row.revision_number or 0) + 1
            row.updated_at = utcnow()
            await s.flush()
            return self._fip_view(row)

    async def delete_floatingip(self, ctx: RequestContext, floatingip_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self._fip_row(s, ctx, floatingip_id)
            check_owner(ctx, row.project_id, "delete_floatingip")
            if row.router_id:
                await self._disassociate(s, ctx, row)
            await delete_port_rows(s, row.floating_port_id)
            self.store.network_changed(s, ctx, "port_delete_end", row.floating_network_id)
            await s.execute(delete(FloatingIP).where(FloatingIP.id == row.id))
            await self.quotas.release(s, row.project_id, floatingip=1)
