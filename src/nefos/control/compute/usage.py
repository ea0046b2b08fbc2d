"""Usage of servers over a period (os-simple-tenant-usage), computed as Nova's
SimpleTenantUsageController does from each server's lifetime: the hours between its
``launched_at`` and its ``terminated_at`` (or the period's end) that fall in the period.

Deleted servers count (Nova reads instances whatever their ``deleted``); a server never launched
does not. Servers are taken in (project_id, uuid) order and paged by a server's uuid, as Nova's
``instance_get_active_by_window_joined``.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, or_, select

from nefos import exceptions
from nefos.db.models import utcnow
from nefos.db.session import Database
from nefos.objects.instance import INSTANCES

_COLUMNS = (INSTANCES.c.uuid, INSTANCES.c.project_id, INSTANCES.c.display_name, INSTANCES.c.vm_state,
            INSTANCES.c.flavor, INSTANCES.c.vcpus, INSTANCES.c.memory_mb, INSTANCES.c.root_gb,
            INSTANCES.c.ephemeral_gb, INSTANCES.c.launched_at, INSTANCES.c.terminated_at)


def hours_for(launched_at: dt.datetime | None, terminated_at: dt.datetime | None, start: dt.datetime,
              stop: dt.datetime) -> float:
    """Nova's ``_hours_for``: the hours of the server's life inside [start, stop]."""
    if terminated_at is not None and terminated_at < start:
        return 0
    if launched_at is None or launched_at > stop:
        return 0
    begin = max(launched_at, start)
    end = min(stop, terminated_at) if terminated_at is not None else stop
    return (end - begin).total_seconds() / 3600.0


async def _servers(db: Database, start: dt.datetime, stop: dt.datetime, tenant_id: str | None,
                   limit: int | None, marker: str | None) -> list[dict]:
    t = INSTANCES
    q = select(*_COLUMNS).where(or_(t.c.terminated_at.is_(None), t.c.terminated_at > start),
                                t.c.launched_at < stop)
    if tenant_id:
        q = q.where(t.c.project_id == tenant_id)
    async with db.reader() as s:
        if marker is not None:
            mark = (await s.execute(select(t.c.project_id, t.c.uuid).where(t.c.uuid == marker))).one_or_none()
            if mark is None:
                raise exceptions.MarkerNotFound(marker=marker)
            q = q.where(or_(t.c.project_id > mark.project_id,
                            and_(t.c.project_id == mark.project_id, t.c.uuid > mark.uuid)))
        q = q.order_by(t.c.project_id, t.c.uuid)
        if limit is not None:
            q = q.limit(limit)
        return [dict(r) for r in (await s.execute(q)).mappings().all()]


def _server_usage(row: dict, start: dt.datetime, stop: dt.datetime, now: dt.datetime) -> dict:
    flavor = row["flavor"] or {}
    ended_at = row["terminated_at"]
    started_at = row["launched_at"]
    state = "terminated" if ended_at else row["vm_state"]
    uptime = (ended_at if ended_at else now) - started_at
    return {
        "hours": hours_for(started_at, ended_at, start, stop),
        "flavor": flavor.get("name") or "",
        "instance_id": row["uuid"],
        "name": row["display_name"],
        "tenant_id": row["project_id"],
        "memory_mb": flavor.get("memory_mb", row["memory_mb"]),
        "local_gb": flavor.get("root_gb", row["root_gb"]) + flavor.get("ephemeral_gb", row["ephemeral_gb"]),
        "vcpus": flavor.get("vcpus", row["vcpus"]),
        "started_at": started_at,
        "ended_at": ended_at,
        "state": state,
        "uptime": int(uptime.total_seconds()),
    }


async def tenant_usages(db: Database, start: dt.datetime, stop: dt.datetime, *, tenant_id: str | None = None,
                        detailed: bool = True, limit: int | None = None,
                        marker: str | None = None) -> tuple[list[dict], list[dict]]:
    """(one summary per project, every server's usage) over [start, stop], as Nova's
    ``_tenant_usages_for_period``; timestamps are naive UTC datetimes."""
    now = utcnow()
    summaries: dict[str, dict] = {}
    server_usages = []
    for row in await _servers(db, start, stop, tenant_id, limit, marker):
        info = _server_usage(row, start, stop, now)
        summary = summaries.get(info["tenant_id"])
        if summary is None:
            summary = summaries[info["tenant_id"]] = {
                "tenant_id": info["tenant_id"], **({"server_usages": []} if detailed else {}),
                "total_local_gb_usage": 0, "total_vcpus_usage": 0, "total_memory_mb_usage": 0,
                "total_hours": 0, "start": start, "stop": stop}
        summary["total_local_gb_usage"] += info["local_gb"] * info["hours"]
        summary["total_vcpus_usage"] += info["vcpus"] * info["hours"]
        summary["total_memory_mb_usage"] += info["memory_mb"] * info["hours"]
        summary["total_hours"] += info["hours"]
        server_usages.append(info)
        if detailed:
            summary["server_usages"].append(info)
    return list(summaries.values()), server_usages
