"""The event stream's durable log (``stream_events``): what changed, written in the transaction of
the change itself, so a committed change always has its entry and a rolled back one never has.

Writers call ``append`` with their own session. Readers (``api/events.py``) read the entries after
the last id they saw, with each server's project taken from ``instances`` (soft-deleted rows stay),
so no writer has to look it up.

Types: ``server.created``, ``server.updated`` (vm_state, task_state or power_state changed),
``server.deleted``, ``server.step.started`` / ``server.step.finished`` (an instance action's step,
with its result), ``server.event.received`` (an external event the Compute API accepted),
``host.up`` / ``host.down`` (heartbeats seen or missed past ``service_down_time``),
``host.disabled`` / ``host.enabled`` (by an operator, or automatically: ``AUTO: `` reasons).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import bindparam, delete, func, insert, select

from nefos.db.models import Instance, InstanceAction, InstanceActionEvent, StreamEvent, utcnow
from nefos.model import states

SERVER_CREATED = "server.created"
SERVER_UPDATED = "server.updated"
SERVER_DELETED = "server.deleted"
STEP_STARTED = "server.step.started"
STEP_FINISHED = "server.step.finished"
EXTERNAL_EVENT = "server.event.received"
HOST_UP = "host.up"
HOST_DOWN = "host.down"
HOST_DISABLED = "host.disabled"
HOST_ENABLED = "host.enabled"
TYPES = (SERVER_CREATED, SERVER_UPDATED, SERVER_DELETED, STEP_STARTED, STEP_FINISHED, EXTERNAL_EVENT,
         HOST_UP, HOST_DOWN, HOST_DISABLED, HOST_ENABLED)

# A save that changes one of these columns is a state change the stream tells.
STATE_COLUMNS = frozenset({"vm_state", "task_state", "power_state"})

TABLE = StreamEvent.__table__
_INSERT = insert(TABLE)
_ACTIONS = InstanceAction.__table__
_STEPS = InstanceActionEvent.__table__
_INSTANCES = Instance.__table__


def server_state(instance: dict) -> dict:
    """The state fields a server's entry carries (and its API ``status``)."""
    return {"status": states.status_from_state(instance.get("vm_state"), instance.get("task_state")),
            "vm_state": instance.get("vm_state"), "task_state": instance.get("task_state"),
            "power_state": instance.get("power_state"), "progress": instance.get("progress")}


def entry(type_: str, *, server_id: str | None = None, host: str | None = None, name: str | None = None,
          data: dict | None = None) -> dict:
    return {"created_at": utcnow(), "type": type_, "server_id": server_id, "host": host, "name": name,
            "data": data}


async def append(session, *entries: dict) -> None:
    """Write ``entries`` (from ``entry``) in ``session``'s transaction."""
    if len(entries) == 1:  # one row: a plain execute, not executemany's path
        await session.execute(_INSERT, entries[0])
    elif entries:
        await session.execute(_INSERT, list(entries))


async def server_saved(session, instance: dict, updates) -> None:
    """The entry of a save of ``instance`` (its new row) when ``updates`` changed its state."""
    if STATE_COLUMNS.intersection(updates):
        await append(session, entry(SERVER_UPDATED, server_id=instance["uuid"], host=instance.get("host"),
                                    data=server_state(instance)))


def host_disabled(host: str, disabled: bool, reason: str | None, by: str | None) -> dict:
    """The entry of a compute service disabled or enabled (``by``: "operator" or "auto")."""
    return entry(HOST_DISABLED if disabled else HOST_ENABLED, host=host,
                 data={"disabled_reason": reason if disabled else None, "disabled_by": by})


# A step's finish names only the step's row: its server and name come from the rows themselves,
# in the same statement (no read before the write).
_STEP_FINISHED = insert(TABLE).from_select(
    ["created_at", "type", "server_id", "host", "name", "data"],
    select(bindparam("b_now"), bindparam("b_type"), _ACTIONS.c.instance_uuid, _STEPS.c.host, _STEPS.c.event,
           bindparam("b_data", type_=TABLE.c.data.type))
    .select_from(_STEPS.join(_ACTIONS, _ACTIONS.c.id == _STEPS.c.action_id))
    .where(_STEPS.c.id == bindparam("b_id")))


async def step_finished(session, step_id: int, result: str) -> None:
    await session.execute(_STEP_FINISHED, {"b_now": utcnow(), "b_type": STEP_FINISHED, "b_id": step_id,
                                           "b_data": {"result": result}})


# Readers -------------------------------------------------------------------------------------------

_AFTER = (select(TABLE, _INSTANCES.c.project_id)
          .select_from(TABLE.outerjoin(_INSTANCES, _INSTANCES.c.uuid == TABLE.c.server_id))
          .where(TABLE.c.id > bindparam("b_after"))
          .order_by(TABLE.c.id).limit(bindparam("b_limit")))
_BETWEEN = _AFTER.where(TABLE.c.id <= bindparam("b_upto"))
_NEWEST = select(func.max(TABLE.c.id))
_OLDEST = select(func.min(TABLE.c.id))


def _plain(row) -> dict:
    data = dict(row)
    when = data["created_at"]
    data["created_at"] = when.replace(tzinfo=dt.timezone.utc).isoformat() if when.tzinfo is None else when.isoformat()
    return data


_BETWEEN_OF_PROJECT = _BETWEEN.where(_INSTANCES.c.project_id == bindparam("b_project"))


async def read_after(db, after_id: int, *, limit: int = 500, upto: int | None = None,
                     project_id: str | None = None) -> list[dict]:
    """Entries with ``after_id < id`` (and ``id <= upto``), in id order, each with its server's
    ``project_id`` (None for a host's entries); with ``project_id`` (and ``upto``), only that
    project's servers' entries (a project's client resuming reads no other project's rows)."""
    params = {"b_after": after_id, "b_limit": limit}
    query = _AFTER
    if upto is not None:
        params["b_upto"] = upto
        query = _BETWEEN
        if project_id is not None:
            params["b_project"] = project_id
            query = _BETWEEN_OF_PROJECT
    async with db.reader() as s:
        rows = (await s.execute(query, params)).mappings().all()
    return [_plain(r) for r in rows]


async def newest_id(db) -> int:
    async with db.reader() as s:
        return (await s.execute(_NEWEST)).scalar() or 0


async def oldest_id(db) -> int | None:
    async with db.reader() as s:
        return (await s.execute(_OLDEST)).scalar()


async def purge(db, retention: float) -> int:
    """Drop the entries older than ``retention`` seconds; how many went."""
    cutoff = utcnow() - dt.timedelta(seconds=retention)
    async with db.transaction() as s:
        return (await s.execute(delete(TABLE).where(TABLE.c.created_at < cutoff))).rowcount or 0
