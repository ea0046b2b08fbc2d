"""Instance actions and their events: what was asked (an action per request) and
each pipeline step it went through (an event per step: start, finish, result,
traceback)."""

from __future__ import annotations

import contextlib
import datetime as dt
import traceback as tb

from sqlalchemy import bindparam, case, func, insert, select, update

from nefos import exceptions
from nefos.context import RequestContext
from nefos.db.models import Instance, InstanceAction, InstanceActionEvent, utcnow
from nefos.db.session import Database, after_commit, given_or
from nefos.objects import event_log

from nefos.model.action_names import (  # noqa: F401  (re-exported: actions.CREATE ...)
    CREATE, DELETE, START, STOP, REBOOT, PAUSE, UNPAUSE, SUSPEND, RESUME, LOCK, UNLOCK, CREATE_IMAGE, BACKUP,
    SHELVE, SHELVE_OFFLOAD, UNSHELVE, CHANGE_PASSWORD, REBUILD, RESCUE, UNRESCUE, ATTACH_INTERFACE,
    DETACH_INTERFACE)


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
_FINISH_UNFINISHED_ACTION = _FINISH_ACTION.where(_ACTIONS.c.finish_time.is_(None))
_INSERT_EVENT = _EVENTS.insert()
# A server with nothing in progress: no task state, or gone.
_IDLE_SERVER = (Instance.task_state.is_(None)) | (Instance.deleted != 0)
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


# An event's write and its event stream entry go in one transaction (the step's row and its entry
# are both there or neither is).

async def event_start(db: Database, ctx: RequestContext, instance_uuid: str, event: str,
                      host: str | None, *, session=None) -> int | None:
    async with given_or(session, db.transaction) as s:
        action_id = await _action_id(s, ctx, instance_uuid)
        if action_id is None:
            return None
        now = utcnow()
        result = await s.execute(_INSERT_EVENT, {"action_id": action_id, "event": event, "start_time": now,
                                                 "host": host, "created_at": now})
        await event_log.append(s, event_log.entry(event_log.STEP_STARTED, server_id=instance_uuid, host=host,
                                                  name=event))
        return result.inserted_primary_key[0]


async def event_finish(db: Database, event_id: int | None, *, result: str = "Success",
                       traceback: str | None = None, details: str | None = None, finish_time=None,
                       session=None) -> None:
    """``finish_time``: when the step ended, if its finish is written later (default: now)."""
    if event_id is None:
        return
    async with given_or(session, db.transaction) as s:
        await s.execute(_FINISH_EVENT, {"b_id": event_id, "finish_time": finish_time or utcnow(), "result": result,
                                        "traceback": traceback, "details": details})
        await event_log.step_finished(s, event_id, result)


async def record_event(db: Database, ctx: RequestContext, instance_uuid: str, event: str,
                       host: str | None, start_time, *, result: str = "Success",
                       traceback: str | None = None, details: str | None = None, finish_time=None,
                       session=None) -> None:
    """A finished step in one write (for short steps nobody needs to see in progress);
    ``finish_time``: when it ended, if written later (default: now)."""
    async with given_or(session, db.transaction) as s:
        action_id = await _action_id(s, ctx, instance_uuid)
        if action_id is None:
            return
        await s.execute(_INSERT_EVENT, {"action_id": action_id, "event": event, "start_time": start_time,
                                        "finish_time": finish_time or utcnow(), "host": host, "result": result,
                                        "traceback": traceback, "details": details, "created_at": start_time})
        await event_log.append(s, event_log.entry(event_log.STEP_FINISHED, server_id=instance_uuid, host=host,
                                                  name=event, data={"result": result}))


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
                        message: str | None = None, *, unless_finished: bool = False) -> None:
    """Mark the request's action finished (``unless_finished``: only if nothing finished it yet)."""
    async with db.transaction() as s:
        await s.execute(_FINISH_UNFINISHED_ACTION if unless_finished else _FINISH_ACTION, {"b_instance": instance_uuid, "b_request": ctx.request_id,
                                         "b_now": utcnow(), "b_message": message})


async def finish_overtaken(db: Database, instance_uuid: str, newest_request_id: str) -> None:
    """Finish, as failed, the unfinished actions (and their events) of the instance older than the
    request ``newest_request_id``: they were interrupted (a host restart, a lost request) and
    overtaken by that newer one, which is the one carried out. A create ends in its server's state
    instead (as in Nova) and is left alone."""
    now = utcnow()
    async with db.transaction() as s:
        newest = (await s.execute(select(func.max(InstanceAction.id)).where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceAction.request_id == newest_request_id))).scalar_one_or_none()
        if newest is None:
            return
        overtaken = (await s.execute(select(InstanceAction.id).where(
            InstanceAction.instance_uuid == instance_uuid, InstanceAction.id < newest,
            InstanceAction.finish_time.is_(None), InstanceAction.action != CREATE))).scalars().all()
        if not overtaken:
            return
        await s.execute(update(InstanceActionEvent).where(
            InstanceActionEvent.action_id.in_(overtaken), InstanceActionEvent.finish_time.is_(None))
            .values(finish_time=now, result="Error"))
        await s.execute(update(InstanceAction).where(InstanceAction.id.in_(overtaken))
                        .values(finish_time=now, message="Error"))


async def end_interrupted_steps(db: Database, host: str, reason: str) -> int:
    """A compute host starting again ends the steps its killed process left open (it asks before it
    serves any request, so every step open there is its dead process's): nothing will finish
    them any more. Each is finished as failed with ``reason``; its action too, when the server has
    nothing in progress (the operation is over: recovery resumes only the servers left in a task)
    and no other step of it is still open. A create ends in its server's state instead. Returns
    how many steps were ended."""
    now = utcnow()
    async with db.transaction() as s:
        interrupted = (await s.execute(select(_EVENTS.c.id, _EVENTS.c.action_id).where(
            _EVENTS.c.host == host, _EVENTS.c.finish_time.is_(None)))).all()
        if not interrupted:
            return 0
        await s.execute(update(_EVENTS).where(_EVENTS.c.id.in_([event_id for event_id, _ in interrupted]))
                        .values(finish_time=now, result="Error", details=reason[:255]))
        still_open = select(_EVENTS.c.id).where(_EVENTS.c.action_id == _ACTIONS.c.id,
                                                _EVENTS.c.finish_time.is_(None)).exists()
        over = (await s.execute(select(_ACTIONS.c.id).join(Instance, Instance.uuid == _ACTIONS.c.instance_uuid).where(
            _ACTIONS.c.id.in_({action_id for _, action_id in interrupted}), _ACTIONS.c.finish_time.is_(None),
            _ACTIONS.c.action != CREATE, _IDLE_SERVER, ~still_open))).scalars().all()
        if over:
            await s.execute(update(_ACTIONS).where(_ACTIONS.c.id.in_(over)).values(finish_time=now, message="Error"))
    return len(interrupted)


async def finish_abandoned(db: Database, older_than: dt.timedelta, *, steps_ended: dt.timedelta) -> list[int]:
    """Finish the actions nothing will finish any more, as Nova would have had its process lived;
    returns their ids. Both kinds are on a server with nothing in progress (no task state, or
    gone); a create ends in its server's state instead.

    * The request died before anything acted on it (its API process killed midway, say): no
      event, started longer than ``older_than`` ago. Finished as failed.
    * The host's own finish was lost (the host killed, or the call lost, after its last step): every
      event ended, the last one longer than ``steps_ended`` ago; a live
      host finishes the action right after its last step. Finished as its events ended: failed if
      one of them failed."""
    cutoff = utcnow() - older_than
    steps_cutoff = utcnow() - steps_ended
    async with db.transaction() as s:
        abandoned = (await s.execute(select(InstanceAction.id).join(
            Instance, Instance.uuid == InstanceAction.instance_uuid).where(
            InstanceAction.finish_time.is_(None), InstanceAction.action != CREATE,
            InstanceAction.start_time < cutoff, _IDLE_SERVER,
            ~select(InstanceActionEvent.id).where(InstanceActionEvent.action_id == InstanceAction.id).exists(),
        ))).scalars().all()
        if abandoned:
            await s.execute(update(InstanceAction).where(InstanceAction.id.in_(abandoned),
                                                         InstanceAction.finish_time.is_(None))
                            .values(finish_time=utcnow(), message="Error"))
        ended = (await s.execute(select(
            InstanceAction.id, func.sum(case((InstanceActionEvent.result == "Error", 1), else_=0)))
            .join(Instance, Instance.uuid == InstanceAction.instance_uuid)
            .join(InstanceActionEvent, InstanceActionEvent.action_id == InstanceAction.id)
            .where(InstanceAction.finish_time.is_(None), InstanceAction.action != CREATE, _IDLE_SERVER)
            .group_by(InstanceAction.id)
            .having(func.count(InstanceActionEvent.id) == func.count(InstanceActionEvent.finish_time),
                    func.max(InstanceActionEvent.finish_time) < steps_cutoff))).all()
        for failed in (False, True):
            ids = [action_id for action_id, errors in ended if bool(errors) == failed]
            if ids:
                await s.execute(update(InstanceAction).where(InstanceAction.id.in_(ids),
                                                             InstanceAction.finish_time.is_(None))
                                .values(finish_time=utcnow(), message="Error" if failed else None))
    return [*abandoned, *(action_id for action_id, _errors in ended)]


# Reading them (os-instance-actions) ------------------------------------------------

async def list_actions(db: Database, uuid: str, *, limit: int | None = None, marker: str | None = None,
                       changes_since: dt.datetime | None = None,
                       changes_before: dt.datetime | None = None) -> list[dict]:
    """The server's actions, newest first, each with ``updated_at`` (its last event's time, as Nova
    keeps it); ``marker`` (a request id), ``limit`` and the changes-since/-before bounds on
    ``updated_at`` page and filter them (2.58, 2.66)."""
    async with db.reader() as s:
        rows = (await s.execute(select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
                                .order_by(InstanceAction.start_time.desc(), InstanceAction.id.desc()))).scalars().all()
        last_event = dict((await s.execute(
            select(InstanceActionEvent.action_id,
                   func.max(func.coalesce(InstanceActionEvent.finish_time, InstanceActionEvent.start_time)))
            .where(InstanceActionEvent.action_id.in_([r.id for r in rows]))
            .group_by(InstanceActionEvent.action_id))).all()) if rows else {}
    result = []
    for row in rows:
        action = row.to_dict()
        # As Nova: an action's updated_at starts at its start and moves with each event.
        action["updated_at"] = max(t for t in (last_event.get(row.id), row.updated_at, row.start_time) if t)
        result.append(action)
    if marker is not None:
        index = next((i for i, a in enumerate(result) if a["request_id"] == marker), None)
        if index is None:
            raise exceptions.MarkerNotFound(marker=marker)
        result = result[index + 1:]
    if changes_since is not None:
        result = [a for a in result if a["updated_at"] >= changes_since]
    if changes_before is not None:
        result = [a for a in result if a["updated_at"] <= changes_before]
    return result if limit is None else result[:limit]


async def get_action(db: Database, uuid: str, request_id: str) -> dict:
    """The server's action of request ``request_id`` with its events, oldest first."""
    async with db.reader() as s:
        action = (await s.execute(select(InstanceAction).where(
            InstanceAction.instance_uuid == uuid, InstanceAction.request_id == request_id))).scalars().first()
        if action is None:
            raise exceptions.InstanceActionNotFound(request_id=request_id, instance_uuid=uuid)
        events = (await s.execute(select(InstanceActionEvent).where(
            InstanceActionEvent.action_id == action.id).order_by(InstanceActionEvent.id))).scalars().all()
    result = action.to_dict()
    result["events"] = [e.to_dict() for e in events]
    times = [e.finish_time or e.start_time for e in events]
    result["updated_at"] = max(t for t in (*times, action.updated_at, action.start_time) if t)
    return result
