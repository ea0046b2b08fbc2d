"""Security groups and their rules (Neutron's), one service of the network manager.

``SecurityGroups`` is a mixin of ``nefos.control.network.manager.NetworkManager``: its public methods are
the network service's bus methods and the Networking API's, like the manager's own; it uses the
manager's plumbing (``tx``, ``_check_owner``, quotas). A project's default group is
unique by ``default_security_group``'s primary key.
"""

from __future__ import annotations

import ipaddress

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import DefaultSecurityGroup, PortSecurityGroup, SecurityGroup, SecurityGroupRule, utcnow
from nefos.control.network import attributes as attrs
from nefos.control.network import list_query, schemas
from nefos.control.network.common import (
    bulk as _bulk, check_owner, chunks as _chunks, iso, new_id, not_owner as _not_owner, project_for_create,
)
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.store import NetworkStore

SECURITY_GROUP_FIELDS = schemas.fields("security_group")
RULE_FIELDS = schemas.fields("security_group_rule")
PORT_RANGE_PROTOCOLS = {"tcp", "udp", "sctp", "dccp", "udplite", "6", "17", "132", "33", "136"}
ICMP_PROTOCOLS = {"icmp", "ipv6-icmp", "icmpv6", "1", "58"}

# The views' fields in SQL (``list_query``), as ``_group_views`` and ``_rule_view`` show them.
_GROUP_COLUMNS = {
    "id": list_query.Plain(SecurityGroup.id),
    "name": list_query.Plain(SecurityGroup.name, func.coalesce(SecurityGroup.name, "")),
    "description": func.coalesce(SecurityGroup.description, ""), "project_id": list_query.Plain(SecurityGroup.project_id),
    "stateful": func.coalesce(SecurityGroup.stateful, False), "shared": list_query.Fixed(False),
    "tags": list_query.Fixed([]), "revision_number": func.coalesce(SecurityGroup.revision_number, 0),
}
_RULE_COLUMNS = {
    "id": list_query.Plain(SecurityGroupRule.id),
    "security_group_id": list_query.Plain(SecurityGroupRule.security_group_id),
    "direction": SecurityGroupRule.direction, "ethertype": SecurityGroupRule.ethertype,
    "protocol": SecurityGroupRule.protocol, "port_range_min": SecurityGroupRule.port_range_min,
    "port_range_max": SecurityGroupRule.port_range_max, "remote_ip_prefix": SecurityGroupRule.remote_ip_prefix,
    "remote_group_id": SecurityGroupRule.remote_group_id,
    "description": func.coalesce(SecurityGroupRule.description, ""), "project_id": list_query.Plain(SecurityGroupRule.project_id),
    "tags": list_query.Fixed([]), "revision_number": func.coalesce(SecurityGroupRule.revision_number, 0),
}

_DEFAULT_GROUP = select(DefaultSecurityGroup.__table__.c.security_group_id).where(
    DefaultSecurityGroup.__table__.c.project_id == bindparam("b_project"))


class SecurityGroups:
    """Security groups and rules: their part of the bus and of the Networking API."""

    def __init__(self, store: NetworkStore, quotas: NetworkQuotas):
        self.store = store
        self.quotas = quotas

    # Groups --------------------------------------------------------------------

    async def ensure_default_group_in(self, s, project_id: str) -> str:
        """The project's ``default`` group, created on first need inside the caller's transaction
        ``s``; racing creators agree on one."""
        found = (await s.execute(_DEFAULT_GROUP, {"b_project": project_id})).scalar_one_or_none()
        if found:
            return found
        gid = new_id()
        now = utcnow()
        try:
            async with s.begin_nested():
                await s.execute(insert(SecurityGroup).values(
                    id=gid, name="default", description="Default security group", project_id=project_id,
                    stateful=True, revision_number=0, created_at=now, updated_at=now))
                await s.execute(insert(DefaultSecurityGroup).values(project_id=project_id, security_group_id=gid))
                for direction, ethertype in (("egress", "IPv4"), ("egress", "IPv6"),
                                             ("ingress", "IPv4"), ("ingress", "IPv6")):
                    await s.execute(insert(SecurityGroupRule).values(
                        id=new_id(), security_group_id=gid, project_id=project_id, direction=direction,
                        ethertype=ethertype, remote_group_id=gid if direction == "ingress" else None,
                        description="", revision_number=0, created_at=now, updated_at=now))
        except IntegrityError:
            found = (await s.execute(_DEFAULT_GROUP, {"b_project": project_id})).scalar_one_or_none()
            if found is None:
                raise
            return found
        await self.quotas.force_usage(s, project_id, security_group=1, security_group_rule=4)
        return gid

    async def ensure_default_security_group(self, ctx: RequestContext, project_id: str | None = None) -> str:
        """The id of ``project_id``'s (default: the caller's) default group, creating it if needed."""
        project = project_id or ctx.project_id
        if project != ctx.project_id and not ctx.is_admin:
            raise _not_owner("create_security_group")
        async with self.store.reader() as s:
            found = (await s.execute(_DEFAULT_GROUP, {"b_project": project})).scalar_one_or_none()
        if found:
            return found
        async with self.store.transaction() as s:
            return await self.ensure_default_group_in(s, project)

    def _group_query(self, ctx: RequestContext):
        q = select(SecurityGroup)
        if not ctx.is_admin:
            q = q.where(SecurityGroup.project_id == ctx.project_id)
        return q

    async def _group_row(self, s, ctx: RequestContext, group_id: str) -> SecurityGroup:
        row = (await s.execute(self._group_query(ctx).where(SecurityGroup.id == str(group_id)))).scalar_one_or_none()
        if row is None:
            raise exceptions.SecurityGroupNotFound(id=group_id)
        return row

    @staticmethod
    def _rule_view(row: SecurityGroupRule) -> dict:
        return {
            "id": row.id, "security_group_id": row.security_group_id, "direction": row.direction,
            "ethertype": row.ethertype, "protocol": row.protocol, "port_range_min": row.port_range_min,
            "port_range_max": row.port_range_max, "remote_ip_prefix": row.remote_ip_prefix,
            "remote_group_id": row.remote_group_id, "description": row.description or "",
            "project_id": row.project_id, "tenant_id": row.project_id, "tags": [],
            "created_at": iso(row.created_at), "updated_at": iso(row.updated_at or row.created_at),
            "revision_number": row.revision_number or 0,
        }

    async def _group_views(self, s, rows: list[SecurityGroup]) -> list[dict]:
        ids = [r.id for r in rows]
        rules: dict[str, list[dict]] = {i: [] for i in ids}
        for chunk in _chunks(ids):
            for rule in (await s.execute(select(SecurityGroupRule).where(
                    SecurityGroupRule.security_group_id.in_(chunk))
                    .order_by(SecurityGroupRule.created_at, SecurityGroupRule.id))).scalars():
                rules[rule.security_group_id].append(self._rule_view(rule))
        return [{
            "id": r.id, "name": r.name or "", "description": r.description or "",
            "project_id": r.project_id, "tenant_id": r.project_id, "stateful": bool(r.stateful),
            "shared": False, "security_group_rules": rules[r.id], "tags": [],
            "created_at": iso(r.created_at), "updated_at": iso(r.updated_at or r.created_at),
            "revision_number": r.revision_number or 0,
        } for r in rows]

    async def _create_security_group(self, s, ctx: RequestContext, body: dict) -> dict:
        body = attrs.validate_body("security_group", body, create=True, is_admin=ctx.is_admin)
        project = project_for_create(ctx, body)
        if project:
            await self.ensure_default_group_in(s, project)
        if body["name"] == "default":
            raise exceptions.SecurityGroupDefaultAlreadyExists()
        now = utcnow()
        row = SecurityGroup(id=new_id(), name=body["name"], description=body["description"],
                            project_id=project, stateful=body["stateful"], revision_number=0,
                            created_at=now, updated_at=now)
        s.add(row)
        await s.flush()
        for ethertype in ("IPv4", "IPv6"):
            s.add(SecurityGroupRule(id=new_id(), security_group_id=row.id, project_id=project,
                                    direction="egress", ethertype=ethertype, description="",
                                    revision_number=0, created_at=now, updated_at=now))
        await s.flush()
        await self.quotas.consume(s, project, security_group=1, security_group_rule=2)
        return (await self._group_views(s, [row]))[0]

    async def create_security_group(self, ctx: RequestContext, security_group: dict) -> dict:
        async with self.store.transaction() as s:
            return await self._create_security_group(s, ctx, security_group)

    async def create_security_groups(self, ctx: RequestContext, security_groups: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self._create_security_group(s, ctx, g) for g in _bulk(security_groups)]

    async def get_security_group(self, ctx: RequestContext, security_group_id: str,
                                 fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            row = await self._group_row(s, ctx, security_group_id)
            return attrs.select_fields((await self._group_views(s, [row]))[0], fields)

    async def list_security_groups(self, ctx: RequestContext, filters: dict | None = None,
                                   fields: list[str] | None = None, sort_key=None, sort_dir=None,
                                   limit: int | None = None, marker: str | None = None,
                                   page_reverse: bool = False) -> list[dict]:
        # As Neutron: listing creates the caller's (or the filtered project's) default group.
        wanted = (filters or {}).get("project_id") or (filters or {}).get("tenant_id")
        wanted = wanted if isinstance(wanted, list) else ([wanted] if wanted else [])
        for project in {ctx.project_id, *(wanted[:1] if ctx.is_admin else [])}:
            if project:
                await self.ensure_default_security_group(ctx, project)
        plan = await list_query.plan(SECURITY_GROUP_FIELDS, _GROUP_COLUMNS, filters=filters, sort_key=sort_key,
                                     sort_dir=sort_dir, limit=limit, marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_security_group(ctx, m))
        async with self.store.reader() as s:
            rows = plan.in_order((await s.execute(plan.statement(self._group_query(ctx)))).scalars().all())
            docs = await self._group_views(s, rows)
        return [attrs.select_fields(d, fields) for d in docs]

    async def update_security_group(self, ctx: RequestContext, security_group_id: str,
                                    security_group: dict) -> dict:
        body = attrs.validate_body("security_group", security_group, create=False, is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self._group_row(s, ctx, security_group_id)
            is_default = (await s.execute(select(DefaultSecurityGroup.project_id).where(
                DefaultSecurityGroup.security_group_id == row.id))).first() is not None
            if is_default and body.get("name", "default") != "default":
                raise exceptions.Conflict("Updating default security group not allowed.")
            if not is_default and body.get("name") == "default":
                raise exceptions.SecurityGroupDefaultAlreadyExists()
            for key, value in body.items():
                setattr(row, key, value)
            if body:
                row.revision_number = (row.revision_number or 0) + 1
                row.updated_at = utcnow()
            await s.flush()
            return (await self._group_views(s, [row]))[0]

    async def delete_security_group(self, ctx: RequestContext, security_group_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self._group_row(s, ctx, security_group_id)
            is_default = (await s.execute(select(DefaultSecurityGroup.project_id).where(
                DefaultSecurityGroup.security_group_id == row.id))).first() is not None
            if is_default and not ctx.is_admin:
                raise exceptions.SecurityGroupCannotRemoveDefault()
            in_use = (await s.execute(select(PortSecurityGroup.port_id).where(
                PortSecurityGroup.security_group_id == row.id).limit(1))).first()
            if in_use is not None:
                raise exceptions.SecurityGroupInUse(id=row.id)
            rules = (await s.execute(select(SecurityGroupRule.id, SecurityGroupRule.project_id).where(or_(
                SecurityGroupRule.security_group_id == row.id,
                SecurityGroupRule.remote_group_id == row.id)))).all()
            for rid, project in rules:
                await s.execute(delete(SecurityGroupRule).where(SecurityGroupRule.id == rid))
                await self.quotas.release(s, project, security_group_rule=1)
            await s.execute(delete(DefaultSecurityGroup).where(DefaultSecurityGroup.security_group_id == row.id))
            await s.execute(delete(SecurityGroup).where(SecurityGroup.id == row.id))
            await self.quotas.release(s, row.project_id, security_group=1)

    # Security group rules -----------------------------------------------------------------

    def _rule_query(self, ctx: RequestContext):
        q = select(SecurityGroupRule)
        if not ctx.is_admin:
            q = q.join(SecurityGroup, SecurityGroup.id == SecurityGroupRule.security_group_id).where(or_(
                SecurityGroupRule.project_id == ctx.project_id, SecurityGroup.project_id == ctx.project_id))
        return q

    async def _rule_row(self, s, ctx: RequestContext, rule_id: str) -> SecurityGroupRule:
        row = (await s.execute(self._rule_query(ctx).where(SecurityGroupRule.id == str(rule_id)))).scalar_one_or_none()
        if row is None:
            raise exceptions.SecurityGroupRuleNotFound(id=rule_id)
        return row

    @staticmethod
    def _check_rule(body: dict) -> None:
        prefix, remote_group = body.get("remote_ip_prefix"), body.get("remote_group_id")
        if prefix and remote_group:
            raise exceptions.SecurityGroupRemoteGroupAndRemoteIpPrefix()
        if prefix:
            version = ipaddress.ip_network(prefix, strict=False).version
            if (version == 4) != (body["ethertype"] == "IPv4"):
                raise exceptions.SecurityGroupRuleParameterConflict(ethertype=body["ethertype"], cidr=prefix)
        protocol, low, high = body.get("protocol"), body.get("port_range_min"), body.get("port_range_max")
        if protocol is None and (low is not None or high is not None):
            raise exceptions.SecurityGroupProtocolRequiredWithPorts()
        if protocol in PORT_RANGE_PROTOCOLS:
            for value in (low, high):
                if value == 0:
                    raise exceptions.SecurityGroupInvalidPortValue(port=value)
            if low is not None and high is not None and low > high:
                raise exceptions.SecurityGroupInvalidPortRange()
            if low is None and high is not None:
                raise exceptions.SecurityGroupInvalidPortRange()
        elif protocol in ICMP_PROTOCOLS:
            for field, attr, value in (("type", "port_range_min", low), ("code", "port_range_max", high)):
                if value is not None and not 0 <= value <= 255:
                    raise exceptions.SecurityGroupInvalidIcmpValue(field=field, attr=attr, value=value)
            if low is None and high is not None:
                raise exceptions.InvalidInput(error_message="ICMP code (port-range-max) is provided but "
                                                            "ICMP type (port-range-min) is missing")
        elif low is not None or high is not None:
            raise exceptions.InvalidInput(error_message="Invalid protocol for port range, only supported "
                                                        "for TCP, UDP, UDPLITE, SCTP, DCCP and ICMP")

    @staticmethod
    def _same_prefix(a: str | None, b: str | None) -> bool:
        """Prefixes are kept as given: they are the same when their networks are (as Neutron's
        duplicate check, on the normalised CIDRs)."""
        def network(prefix):
            return None if prefix is None else str(ipaddress.ip_network(prefix, strict=False))
        a, b = network(a), network(b)
        any_nets = (None, "0.0.0.0/0", "::/0")
        return a == b or (a in any_nets and b in any_nets)

    async def _create_rule(self, s, ctx: RequestContext, body: dict) -> dict:
        body = attrs.validate_body("security_group_rule", body, create=True, is_admin=ctx.is_admin)
        group = await self._group_row(s, ctx, body["security_group_id"])
        project = body.pop("project_id", None) or group.project_id
        if project != group.project_id and not ctx.is_admin:
            raise attrs.bad_request("Specifying 'project_id' or 'tenant_id' other than the authenticated "
                                    "project in request requires admin privileges")
        self._check_rule(body)
        if body.get("remote_group_id"):
            await self._group_row(s, ctx, body["remote_group_id"])
        for existing in (await s.execute(select(SecurityGroupRule).where(
                SecurityGroupRule.security_group_id == group.id))).scalars():
            if (existing.direction == body["direction"] and existing.ethertype == body["ethertype"]
                    and existing.protocol == body.get("protocol")
                    and existing.port_range_min == body.get("port_range_min")
                    and existing.port_range_max == body.get("port_range_max")
                    and existing.remote_group_id == body.get("remote_group_id")
                    and self._same_prefix(existing.remote_ip_prefix, body.get("remote_ip_prefix"))):
                raise exceptions.SecurityGroupRuleExists(rule_id=existing.id)
        now = utcnow()
        row = SecurityGroupRule(id=new_id(), security_group_id=group.id, project_id=project,
                                direction=body["direction"], ethertype=body["ethertype"],
                                protocol=body.get("protocol"), port_range_min=body.get("port_range_min"),
                                port_range_max=body.get("port_range_max"),
                                remote_ip_prefix=body.get("remote_ip_prefix"),
                                remote_group_id=body.get("remote_group_id"), description=body["description"],
                                revision_number=0, created_at=now, updated_at=now)
        s.add(row)
        group.revision_number = (group.revision_number or 0) + 1
        group.updated_at = now
        await s.flush()
        await self.quotas.consume(s, project, security_group_rule=1)
        return self._rule_view(row)

    async def create_security_group_rule(self, ctx: RequestContext, security_group_rule: dict) -> dict:
        async with self.store.transaction() as s:
            return await self._create_rule(s, ctx, security_group_rule)

    async def create_security_group_rules(self, ctx: RequestContext, security_group_rules: list[dict]) -> list[dict]:
        async with self.store.transaction() as s:
            return [await self._create_rule(s, ctx, r) for r in _bulk(security_group_rules)]

    async def get_security_group_rule(self, ctx: RequestContext, security_group_rule_id: str,
                                      fields: list[str] | None = None) -> dict:
        async with self.store.reader() as s:
            return attrs.select_fields(self._rule_view(await self._rule_row(s, ctx, security_group_rule_id)),
                                       fields)

    async def list_security_group_rules(self, ctx: RequestContext, filters: dict | None = None,
                                        fields: list[str] | None = None, sort_key=None, sort_dir=None,
                                        limit: int | None = None, marker: str | None = None,
                                        page_reverse: bool = False) -> list[dict]:
        plan = await list_query.plan(RULE_FIELDS, _RULE_COLUMNS, filters=filters, sort_key=sort_key,
                                     sort_dir=sort_dir, limit=limit, marker=marker, page_reverse=page_reverse,
                                     get_marker=lambda m: self.get_security_group_rule(ctx, m))
        async with self.store.reader() as s:
            rows = plan.in_order((await s.execute(plan.statement(self._rule_query(ctx)))).scalars().all())
        return [attrs.select_fields(self._rule_view(r), fields) for r in rows]

    async def update_security_group_rule(self, ctx: RequestContext, security_group_rule_id: str,
                                         security_group_rule: dict) -> dict:
        body = attrs.validate_body("security_group_rule", security_group_rule, create=False,
                                   is_admin=ctx.is_admin)
        async with self.store.transaction() as s:
            row = await self._rule_row(s, ctx, security_group_rule_id)
            check_owner(ctx, row.project_id, "update_security_group_rule")
            for key, value in body.items():
                setattr(row, key, value)
            if body:
                row.revision_number = (row.revision_number or 0) + 1
                row.updated_at = utcnow()
            await s.flush()
            return self._rule_view(row)

    async def delete_security_group_rule(self, ctx: RequestContext, security_group_rule_id: str) -> None:
        async with self.store.transaction() as s:
            row = await self._rule_row(s, ctx, security_group_rule_id)
            check_owner(ctx, row.project_id, "delete_security_group_rule")
            await s.execute(delete(SecurityGroupRule).where(SecurityGroupRule.id == row.id))
            await s.execute(update(SecurityGroup).where(SecurityGroup.id == row.security_group_id).values(
                revision_number=SecurityGroup.revision_number + 1, updated_at=utcnow()))
            await self.quotas.release(s, row.project_id, security_group_rule=1)
