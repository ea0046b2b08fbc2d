"""What the network service's modules share: Neutron's timestamps, ids, chunking, quota resource
names, errors, the owner checks, and the caller's visibility and the id filter of the prebuilt
Core statements."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import bindparam

from nefos import exceptions
from nefos.context import RequestContext
from nefos.control.network import attributes as attrs

CHUNK = 500

# Neutron's quota resource names -> the names in quota_usages / quotas / config.
QUOTA_RESOURCES = {
    "network": "networks", "subnet": "subnets", "port": "ports",
    "security_group": "security_groups", "security_group_rule": "security_group_rules",
    "router": "routers", "floatingip": "floatingips",
}


def iso(value) -> str | None:
    """Neutron's timestamp format: ISO 8601, seconds, UTC as ``Z``."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_id() -> str:
    return str(uuidlib.uuid4())


def chunks(values: list, size: int = CHUNK):
    for i in range(0, len(values), size):
        yield values[i:i + size]


def not_owner(action: str) -> exceptions.PolicyNotAuthorized:
    return exceptions.PolicyNotAuthorized(f"(rule:{action}) is disallowed by policy")


def bulk(items) -> list:
    if not isinstance(items, list) or not items:
        raise attrs.bad_request("Resources required")
    return items


def visibility(ctx: RequestContext) -> str:
    return "admin" if ctx.is_admin else ("project" if ctx.project_id is not None else "none")


def owned(column, visibility: str):
    return column == bindparam("b_project") if visibility == "project" else column.is_(None)


def where_filters(q, columns: dict[str, Any], keys: tuple):
    for i, field in enumerate(keys):
        q = q.where(columns[field].in_(bindparam(f"f{i}", expanding=True)))
    return q


def project_for_create(ctx: RequestContext, body: dict) -> str | None:
    """The project a new resource belongs to: the body's (an admin's to name) or the caller's."""
    project = body.pop("project_id", None)
    if project and project != ctx.project_id and not ctx.is_admin:
        raise attrs.bad_request("Specifying 'project_id' or 'tenant_id' other than the authenticated "
                                "project in request requires admin privileges")
    return project or ctx.project_id


def check_owner(ctx: RequestContext, project_id: str | None, action: str) -> None:
    if not ctx.is_admin and project_id != ctx.project_id:
        raise not_owner(action)
