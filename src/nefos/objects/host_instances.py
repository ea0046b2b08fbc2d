"""The queries a compute host runs over its own instances (power sync, recovery at start, the
deadlines of stuck tasks) and the unfinished action a resumed operation belongs to; the conductor
runs them for the host."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import or_, select

from nefos.db.models import Instance, InstanceAction
from nefos.objects import instance as instance_obj
from nefos.model import migration_state, states

_BUILD_TASKS = frozenset(t for t in states.BUILD_TASK_STATES if t is not None)


async def full(db, host: str) -> list[dict]:
    """Every live instance of ``host``, whole."""
    async with db.reader() as s:
        rows = (await s.execute(select(Instance).where(Instance.host == host, Instance.deleted == 0)
                                .order_by(Instance.id))).scalars().all()
    return [instance_obj.to_dict(r) for r in rows]


async def states_of(db, host: str) -> list[dict]:
    """uuid, vm_state, task_state and power_state of every live instance of ``host``."""
    async with db.reader() as s:
        return [dict(r._mapping) for r in await s.execute(
            select(Instance.uuid, Instance.vm_state, Instance.task_state, Instance.power_state)
            .where(Instance.host == host, Instance.deleted == 0).order_by(Instance.id))]


async def unchanged_operations(db, host: str, updated_before: dt.datetime) -> list[dict]:
    """The host's instances with a task (or a build) under way, unchanged since ``updated_before``."""
    async with db.reader() as s:
        rows = (await s.execute(select(Instance).where(
            Instance.host == host, Instance.deleted == 0, Instance.updated_at < updated_before,
            or_(Instance.task_state.is_not(None), Instance.vm_state == states.BUILDING)))).scalars().all()
        return [instance_obj.to_dict(r) for r in rows]


async def unchanged_resized(db, updated_before: dt.datetime) -> list[dict]:
    """RESIZED instances (on any host: the source of the resize looks for its own) with no task,
    unchanged since ``updated_before``."""
    async with db.reader() as s:
        rows = (await s.execute(select(Instance).where(
            Instance.deleted == 0, Instance.vm_state == states.RESIZED, Instance.task_state.is_(None),
            Instance.updated_at < updated_before))).scalars().all()
        return [instance_obj.to_dict(r) for r in rows]


async def builds_started_before(db, host: str, created_before: dt.datetime) -> list[str]:
    async with db.reader() as s:
        return list((await s.execute(select(Instance.uuid).where(
            Instance.host == host, Instance.deleted == 0, Instance.vm_state == states.BUILDING,
            Instance.created_at < created_before))).scalars().all())


async def tasks_unchanged_since(db, host: str, updated_before: dt.datetime) -> list[list]:
    """[uuid, task_state, vm_state] of the host's instances whose (non-build) task is older."""
    async with db.reader() as s:
        rows = (await s.execute(select(Instance.uuid, Instance.task_state, Instance.vm_state).where(
            Instance.host == host, Instance.deleted == 0, Instance.task_state.is_not(None),
            Instance.task_state.not_in([t for t in states.BUILD_TASK_STATES if t is not None]),
            Instance.vm_state != states.BUILDING, Instance.updated_at < updated_before))).all()
    return [list(r) for r in rows]


def _before(when: dt.datetime | None, cutoff: dt.datetime | None) -> bool:
    """SQL's ``when < cutoff`` (never true for a NULL), a cutoff of None never reached."""
    return when is not None and cutoff is not None and when < cutoff


async def deadline_candidates(db, host: str, *, lost_before: dt.datetime | None,
                              builds_before: dt.datetime | None, tasks_before: dt.datetime | None) -> dict:
    """Everything one deadline pass of ``host`` acts on (``nefos.host.compute.deadlines``), in one
    read: ``lost`` (whole), the instances with a task (or a build) under way unchanged since
    ``lost_before``; ``resized`` (whole), the RESIZED instances whose confirm pends on this host,
    their source, unchanged since ``lost_before``; ``builds``, the uuids of the BUILDING ones
    created before ``builds_before``; ``tasks``, [uuid, task_state, vm_state] of the (non-build)
    tasks unchanged since ``tasks_before``. A cutoff of None: that check is off.

    Only the host's busy instances are looked at, a few columns each, and only those the pass
    acts on are read whole: a host where nothing is stuck costs the same with 10 servers as with
    1000."""
    out = {"lost": [], "resized": [], "builds": [], "tasks": []}
    if lost_before is None and builds_before is None and tasks_before is None:
        return out
    lost, resized = [], []
    async with db.reader() as s:
        busy = (await s.execute(select(
            Instance.uuid, Instance.vm_state, Instance.task_state, Instance.created_at, Instance.updated_at).where(
            Instance.host == host, Instance.deleted == 0,
            or_(Instance.task_state.is_not(None), Instance.vm_state == states.BUILDING)))).all()
        for uuid, vm_state, task_state, created_at, updated_at in busy:
            if _before(updated_at, lost_before):
                lost.append(uuid)
            if vm_state == states.BUILDING:
                if _before(created_at, builds_before):
                    out["builds"].append(uuid)
            elif task_state not in _BUILD_TASKS and _before(updated_at, tasks_before):
                out["tasks"].append([uuid, task_state, vm_state])
        if lost_before is not None:
            for uuid, system_metadata in await s.execute(select(Instance.uuid, Instance.system_metadata).where(
                    Instance.deleted == 0, Instance.vm_state == states.RESIZED, Instance.task_state.is_(None),
                    Instance.updated_at < lost_before)):
                migration = migration_state.migration_of({"system_metadata": system_metadata}) or {}
                if migration.get("status") == "confirming" and migration.get("source_compute") == host:
                    resized.append(uuid)
        if lost or resized:
            whole = {r.uuid: instance_obj.to_dict(r) for r in (await s.execute(
                select(Instance).where(Instance.uuid.in_([*lost, *resized])).order_by(Instance.id))).scalars()}
            out["lost"] = [whole[u] for u in lost if u in whole]
            out["resized"] = [whole[u] for u in resized if u in whole]
    return out


async def unfinished_action(db, uuid: str, action: str | None) -> dict | None:
    """Project, user and request id of the instance's newest unfinished ``action`` (None: of any kind)."""
    q = select(InstanceAction).where(InstanceAction.instance_uuid == uuid, InstanceAction.finish_time.is_(None))
    if action is not None:
        q = q.where(InstanceAction.action == action)
    async with db.reader() as s:
        row = (await s.execute(q.order_by(InstanceAction.id.desc()).limit(1))).scalar_one_or_none()
    if row is None:
        return None
    return {"project_id": row.project_id, "user_id": row.user_id, "request_id": row.request_id}
