"""Instance actions and their events: what was asked (an action per request) and
each pipeline step it went through (an event per step: start, finish, result,
traceback)."""

from __future__ import annotations

import contextlib
import traceback as tb

from sqlalchemy import bindparam, insert, select, update

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import InstanceAction, InstanceActionEvent, utcnow
from nefos.db.session import Database, after_commit

# Action names, as Nova records them.
CREATE = "create"
DELETE = "delete"
START = "start"
STOP = "stop"
REBOOT = "reboot"
PAUSE = "pause"
UNPAUSE = "unpause"
SUSPEND = "suspend"
RESUME = "resume"
LOCK = "lock"
UNLOCK = "unlock"
CREATE_IMAGE = "createImage"
BACKUP = "createBackup"
SHELVE = "shelve"
SHELVE_OFFLOAD = "shelveOffload"
UNSHELVE = "unshelve"
CHANGE_PASSWORD = "changePassword"
REBUILD = "rebuild"


def new_action(ctx: RequestContext, instance_uuid: str, action: str) -> InstanceAction:
    return InstanceAction(action=action, instance_uuid=instance_uuid, request_id=ctx.request_id,
                          user_id=ctx.user_id, project_id=ctx.project_id, start_time=utcnow())


# Action rows are never rewritten, so (instance, request id) -> action id is cached per process.
_action_ids: dict[tuple[str, str], int] = {}
_ACTION_ID_CACHE_SIZE = 20000


def _remember(key: tuple[str, str], action_id: int) -> None:
    if len(_action_ids) >= _ACTION_ID_CACHE_SIZE:
        _action_ids.clear()
    _action_ids[key] = action_id


_ACTIONS = InstanceAction.__table__
_EVENTS = InstanceActionEvent.__table__
# Built once (several run in every boot; composing a statement costs more than running it).
_INSERT_ACTION = insert(_ACTIONS)
_ACTION_ID = (select(_ACTIONS.c.id)
              .where(_ACTIONS.c.instance_uuid == bindparam("b_instance"),
                     _ACTIONS.c.request_id == bindparam("b_request"))
              .order_by(_ACTIONS.c.id.desc()).limit(1))
_FINISH_ACTION = (update(_ACTIONS)
                  .where(_ACTIONS.c.instance_uuid == bindparam("b_instance"),
                         _ACTIONS.c.request_id == bindparam("b_request"))
                  .values(finish_time=bindparam("b_now"), message=bindparam("b_message")))
_INSERT_EVENT = _EVENTS.insert()
_FINISH_EVENT = _EVENTS.update().where(_EVENTS.c.id == bindparam("b_id"))


async def record_action(db: Database, ctx: RequestContext, instance_uuid: str, action: str,
                        session=None) -> None:
    """Record an action (in ``session``'s transaction when given); its id is known to this
    process's action events once the transaction commits (no look-up by request id)."""
    now = utcnow()
    params = {"action": action, "instance_uuid": instance_uuid, "request_id": ctx.request_id,
              "user_id": ctx.user_id, "project_id": ctx.project_id, "start_time": now, "created_at": now}
    key = (instance_uuid, ctx.request_id)
    if session is not None:
        action_id = (await session.execute(_INSERT_ACTION, params)).inserted_primary_key[0]
        after_commit(session, lambda: _remember(key, action_id))
        return
    async with db.transaction() as s:
        action_id = (await s.execute(_INSERT_ACTION, params)).inserted_primary_key[0]
    _remember(key, action_id)


async def _action_id(s, ctx: RequestContext, instance_uuid: str) -> int | None:
    key = (instance_uuid, ctx.request_id)
    cached = _action_ids.get(key)
    if cached is not None:
        return cached
    action_id = (await s.execute(_ACTION_ID, {"b_instance": instance_uuid, "b_request": ctx.request_id})
                 ).scalar_one_or_none()
    if action_id is not None:
        _remember(key, action_id)
    return action_id


async def event_start(db: Database, ctx: RequestContext, instance_uuid: str, event: str,
                      host: str | None) -> int | None:
    async with db.transaction() as s:
        action_id = await _action_id(s, ctx, instance_uuid)
        if action_id is None:
            return None
        now = utcnow()
        result = await s.execute(_INSERT_EVENT, {"action_id": action_id, "event": event, "start_time": now,
                                                 "host": host, "created_at": now})
        return result.inserted_primary_key[0]


async def event_finish(db: Database, event_id: int | None, *, result: str = "Success",
                       traceback: str | None = None, details: str | None = None) -> None:
    if event_id is None:
        return
    async with db.transaction() as s:
        await s.execute(_FINISH_EVENT, {"b_id": event_id, "finish_time": utcnow(), "result": result,
                                        "traceback": traceback, "details": details})


async def record_event(db: Database, ctx: RequestContext, instance_uuid: str, event: str,
                       host: str | None, start_time, *, result: str = "Success",
                       traceback: str | None = None, details: str | None = None) -> None:
    """A finished step in one write (for short steps nobody needs to see in progress)."""
    async with db.transaction() as s:
        action_id = await _action_id(s, ctx, instance_uuid)
        if action_id is None:
            return
        await s.execute(_INSERT_EVENT, {"action_id": action_id, "event": event, "start_time": start_time,
                                        "finish_time": utcnow(), "host": host, "result": result,
                                        "traceback": traceback, "details": details, "created_at": start_time})


@contextlib.asynccontextmanager
async def step(db: Database, ctx: RequestContext, instance_uuid: str, event: str, host: str | None,
               *, show_in_progress: bool = True):
    """Record one pipeline step as an action event: Success, or Error with the traceback.

    Long steps are written when they start (so they show in progress) and again
    when they end; short ones (``show_in_progress=False``) once, when they end.
    """
    if not show_in_progress:
        start_time = utcnow()
        try:
            yield
        except BaseException as exc:
            await record_event(db, ctx, instance_uuid, event, host, start_time, result="Error",
                               traceback="".join(tb.format_exception(exc)),
                               details=str(exc)[:255] if isinstance(exc, exceptions.NefosError) else None)
            raise
        await record_event(db, ctx, instance_uuid, event, host, start_time)
        return
    event_id = await event_start(db, ctx, instance_uuid, event, host)
    try:
        yield
    except BaseException as exc:
        await event_finish(db, event_id, result="Error",
                           traceback="".join(tb.format_exception(exc)),
                           details=str(exc)[:255] if isinstance(exc, exceptions.NefosError) else None)
        raise
    await event_finish(db, event_id)


async def finish_action(db: Database, ctx: RequestContext, instance_uuid: str,
                        message: str | None = None) -> None:
    async with db.transaction() as s:
        await s.execute(_FINISH_ACTION, {"b_instance": instance_uuid, "b_request": ctx.request_id,
                                         "b_now": utcnow(), "b_message": message})
