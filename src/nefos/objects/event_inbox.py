"""The durable inbox of external events (``instance_external_events``) and each instance's current
event operation (``instance_event_operations``): the rows behind a compute host's waits for
``network-vif-plugged`` (``nefos.host.compute.instance_events``), written for it by the conductor."""

from __future__ import annotations

import datetime as dt
import functools

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from nefos.db.models import (
    InstanceAction, InstanceActionEvent, InstanceEventOperation, InstanceExternalEvent, utcnow,
)
from nefos.db.session import given_or

# Statements built once (each runs in every build).
_OPS = InstanceEventOperation.__table__
_INBOX = InstanceExternalEvent.__table__
_SET_OPERATION = update(_OPS).where(_OPS.c.instance_uuid == bindparam("b_instance")).values(
    operation=bindparam("b_operation"), host=bindparam("b_host"), started_at=bindparam("b_started_at"))
_INSERT_OPERATION = insert(_OPS)
_DROP_EARLIER_EVENTS = delete(_INBOX).where(_INBOX.c.instance_uuid == bindparam("b_instance"),
                                            _INBOX.c.operation != bindparam("b_operation"))
_STORED_EVENTS = select(_INBOX.c.id, _INBOX.c.name, _INBOX.c.tag, _INBOX.c.status).where(
    _INBOX.c.instance_uuid == bindparam("b_instance"), _INBOX.c.operation == bindparam("b_operation"))
_CONSUME_BY_ID = delete(_INBOX).where(_INBOX.c.id.in_(bindparam("b_ids", expanding=True)))
_CONSUME = delete(_INBOX).where(_INBOX.c.instance_uuid == bindparam("b_instance"),
                                _INBOX.c.name == bindparam("b_name"), _INBOX.c.tag == bindparam("b_tag"),
                                _INBOX.c.operation == bindparam("b_operation"))
_PURGE_EVENTS = delete(_INBOX).where(_INBOX.c.received_at < bindparam("b_cutoff"))
_PURGE_OPERATIONS = delete(_OPS).where(_OPS.c.started_at < bindparam("b_cutoff"))
_LATEST_ACTION = (select(InstanceAction.__table__.c.id)
                  .where(InstanceAction.__table__.c.instance_uuid == bindparam("b_instance"))
                  .order_by(InstanceAction.__table__.c.id.desc()).limit(1))
_INSERT_ACTION_EVENT = insert(InstanceActionEvent.__table__)


@functools.lru_cache(maxsize=8)
def _upsert_operation(dialect: str):
    """The instance's operation row written in one statement (the dialect's own upsert), or None."""
    if dialect in ("sqlite", "postgresql"):
        module = __import__(f"sqlalchemy.dialects.{dialect}", fromlist=["insert"])
        stmt = module.insert(_OPS)
        return stmt.on_conflict_do_update(index_elements=[_OPS.c.instance_uuid], set_={
            "operation": stmt.excluded.operation, "host": stmt.excluded.host,
            "started_at": stmt.excluded.started_at})
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert
        stmt = mysql_insert(_OPS)
        return stmt.on_duplicate_key_update(operation=stmt.inserted.operation, host=stmt.inserted.host,
                                            started_at=stmt.inserted.started_at)
    return None


async def begin_operation(db, uuid: str, operation: str, host: str) -> None:
    """Make ``operation`` the instance's current one and drop the events of earlier ones."""
    now = utcnow()
    row = {"instance_uuid": uuid, "operation": operation, "host": host, "started_at": now}
    async with db.transaction() as s:
        upsert = _upsert_operation(s.bind.dialect.name if s.bind is not None else "")
        if upsert is not None:
            await s.execute(upsert, row)
        else:  # any other database: update, else insert
            change = {"b_instance": uuid, "b_operation": operation, "b_host": host, "b_started_at": now}
            if (await s.execute(_SET_OPERATION, change)).rowcount == 0:
                try:
                    async with s.begin_nested():
                        await s.execute(_INSERT_OPERATION, row)
                except IntegrityError:
                    await s.execute(_SET_OPERATION, change)
        await s.execute(_DROP_EARLIER_EVENTS, {"b_instance": uuid, "b_operation": operation})


EVENT_TTL = 3600.0  # unconsumed events and finished operations are purged after this (or 2 x the timeout)


async def purge_expired(db, vif_plugging_timeout: float) -> None:
    """Drop the events and operations older than ``EVENT_TTL`` (or twice ``vif_plugging_timeout``,
    so no waiter's events go before it gave up)."""
    await purge(db, utcnow() - dt.timedelta(seconds=max(EVENT_TTL, 2 * vif_plugging_timeout)))


async def purge(db, cutoff) -> None:
    """Drop the events and operations older than ``cutoff``."""
    async with db.transaction() as s:
        await s.execute(_PURGE_EVENTS, {"b_cutoff": cutoff})
        await s.execute(_PURGE_OPERATIONS, {"b_cutoff": cutoff})


async def stored_events(db, uuid: str, operation: str, *, session=None) -> list[dict]:
    async with given_or(session, db.reader) as s:
        rows = (await s.execute(_STORED_EVENTS, {"b_instance": uuid, "b_operation": operation})).all()
    return [{"id": r.id, "name": r.name, "tag": r.tag, "status": r.status} for r in rows]


async def consume(db, ids: list[int]) -> None:
    async with db.transaction() as s:
        await s.execute(_CONSUME_BY_ID, {"b_ids": ids})


async def record_processing(db, event: dict, *, event_name: str, host: str, result: str, details: str,
                            consume_event: bool, traceback: str | None, at=None) -> None:
    """Record the processing of ``event`` as an ``event_name`` event of the action the API recorded it
    in (an event read from the inbox has none: the server's latest action); ``consume_event``: drop
    its inbox row in the same transaction. ``at``: when it was processed, if recorded later (default: now)."""
    uuid = event["instance_uuid"]
    now = at or utcnow()
    async with db.transaction() as s:
        if consume_event:
            await s.execute(_CONSUME, {"b_instance": uuid, "b_name": event["name"], "b_tag": event.get("tag") or "",
                                       "b_operation": event.get("operation") or ""})
        action_id = event.get("action_id") or (
            await s.execute(_LATEST_ACTION, {"b_instance": uuid})).scalar_one_or_none()
        if action_id is not None:
            await s.execute(_INSERT_ACTION_EVENT, {
                "action_id": action_id, "event": event_name, "start_time": now, "finish_time": now,
                "result": result, "host": host, "details": details[:2000], "traceback": traceback,
                "created_at": now})
