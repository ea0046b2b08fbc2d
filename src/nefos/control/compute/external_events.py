"""The Compute API layer of ``POST /v2.1/os-server-external-events`` (Nova's ``external_instance_event``).

Per the Compute API reference: each event of the batch is answered on its
own — ``code`` 200 (accepted; ``status`` "completed"), 404 (no such server),
422 (the server is on no host yet), 400 (a ``volume-extended``,
``power-update``, ``accelerator-request-bound`` or ``volume-reimaged`` event without
a tag) — and the response is 200 when every
event was accepted, 207 when some were, and 404 ("No instances found for any
event") when none was. Accepting is not processing: an accepted
event is stored in the durable inbox (``instance_external_events``, stamped
with the instance's current operation, a duplicate updating its row),
recorded as an ``api_external_instance_event`` event of the server's current (latest)
instance action (Nova records no action of its own for network-* events), and
cast to the server's compute host, which records how it processed it in the
same action (``nefos.host.compute.instance_events``). The cast never fails the request: the
compute host also reads its inbox.

``power-update`` (2.76; the tag is ``POWER_ON`` or ``POWER_OFF``) reports a guest's power
changed outside Nefos: as Nova, it starts a ``start`` / ``stop`` instance action of its own
(the acceptance and the compute host's ``compute_power_update`` are recorded in it) and the
compute host applies it (``ComputeManager.power_update``); any other tag is answered 200
but dropped, as Nova logs and skips it.

Policy (current Nova's default): the caller needs the ``service`` role (the
``admin`` role is accepted too).
"""

from __future__ import annotations

import functools
import logging

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.clients.compute import ComputeRPCAPI
from nefos.context import RequestContext
from nefos.model.action_names import POWER_OFF, POWER_ON  # noqa: F401  (re-exported)
from nefos.db.models import (Instance, InstanceAction, InstanceActionEvent, InstanceEventOperation,
                             InstanceExternalEvent, utcnow)
from nefos.objects import event_log
from nefos.control.compute.authorization import authorize

LOG = logging.getLogger(__name__)

ACCEPTED_EVENT = "api_external_instance_event"  # the action event recording an accepted event
POLICY = "os_compute_api:os-server-external-events:create"
# As Nova: these events are answered 400 without a tag (power-update's tag is its target power state).
TAG_REQUIRED = ("volume-extended", "power-update", "accelerator-request-bound", "volume-reimaged")
POWER_UPDATE = "power-update"

# Event names by the microversion that introduced them (Nova's schemas).
NAMES_BY_VERSION = (
    ("2.1", ("network-changed", "network-vif-plugged", "network-vif-unplugged", "network-vif-deleted")),
    ("2.51", ("volume-extended",)),
    ("2.76", ("power-update",)),
    ("2.82", ("accelerator-request-bound",)),
    ("2.93", ("volume-reimaged",)),
)
STATUSES = ("failed", "completed", "in-progress")


def event_names(version) -> list[str]:
    names: list[str] = []
    for since, added in NAMES_BY_VERSION:
        if version is None or version.matches(since):
            names.extend(added)
    return names


def request_schema(version) -> dict:
    return {
        "type": "object",
        "properties": {
            "events": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "server_uuid": {"type": "string", "format": "uuid"},
                        "name": {"type": "string", "enum": event_names(version)},
                        "status": {"type": "string", "enum": list(STATUSES)},
                        "tag": {"type": "string", "maxLength": 255},
                    },
                    "required": ["server_uuid", "name"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["events"],
        "additionalProperties": False,
    }


def check_policy(ctx: RequestContext) -> None:
    """The caller may send events: the ``service`` (or ``admin``) role by default."""
    authorize(ctx, POLICY, {})


_INBOX = InstanceExternalEvent.__table__
_INBOX_KEY = ("instance_uuid", "name", "tag", "operation")
_ACTIONS = InstanceAction.__table__
_INSTANCES = Instance.__table__
_OPERATIONS = InstanceEventOperation.__table__
# Built once (a batch of events runs them all).
_TARGETS = (select(_INSTANCES.c.uuid, _INSTANCES.c.host, _OPERATIONS.c.operation, _INSTANCES.c.task_state)
            .select_from(_INSTANCES.outerjoin(_OPERATIONS, _OPERATIONS.c.instance_uuid == _INSTANCES.c.uuid))
            .where(_INSTANCES.c.uuid.in_(bindparam("b_uuids", expanding=True)), _INSTANCES.c.deleted == 0))
_LATEST_ACTIONS = (select(_ACTIONS.c.instance_uuid, func.max(_ACTIONS.c.id))
                   .where(_ACTIONS.c.instance_uuid.in_(bindparam("b_uuids", expanding=True)))
                   .group_by(_ACTIONS.c.instance_uuid))
_INSERT_ACTION_EVENT = insert(InstanceActionEvent.__table__)
_SET_INBOX_ROW = update(_INBOX).where(*[_INBOX.c[c] == bindparam(f"b_{c}") for c in _INBOX_KEY]).values(
    status=bindparam("b_status"), host=bindparam("b_host"), received_at=bindparam("b_received_at"))
_INSERT_INBOX_ROW = insert(_INBOX)


@functools.lru_cache(maxsize=8)
def _upsert(dialect: str):
    """An INSERT of inbox rows, a duplicate key updating its row (the dialect's own upsert), or None."""
    if dialect in ("sqlite", "postgresql"):
        module = __import__(f"sqlalchemy.dialects.{dialect}", fromlist=["insert"])
        stmt = module.insert(_INBOX)
        return stmt.on_conflict_do_update(index_elements=[_INBOX.c[c] for c in _INBOX_KEY], set_={
            "status": stmt.excluded.status, "host": stmt.excluded.host, "received_at": stmt.excluded.received_at})
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert
        stmt = mysql_insert(_INBOX)
        return stmt.on_duplicate_key_update(status=stmt.inserted.status, host=stmt.inserted.host,
                                            received_at=stmt.inserted.received_at)
    return None


async def _store(s, rows: list[dict]) -> None:
    # The last of duplicates in one batch wins (one statement must not touch a row twice).
    unique = list({(r["instance_uuid"], r["name"], r["tag"], r["operation"]): r for r in rows}.values())
    stmt = _upsert(s.bind.dialect.name if s.bind is not None else "")
    if stmt is not None:
        await s.execute(stmt, unique)
        return
    for row in unique:  # any other database: update, else insert
        change = {f"b_{k}": v for k, v in row.items()}
        if (await s.execute(_SET_INBOX_ROW, change)).rowcount:
            continue
        try:
            async with s.begin_nested():
                await s.execute(_INSERT_INBOX_ROW, row)
        except IntegrityError:
            await s.execute(_SET_INBOX_ROW, change)


async def create(rt, ctx: RequestContext, events: list[dict]) -> tuple[list[dict], int]:
    """Accept a validated batch; (the per-event answers, 200 or 207). NotFound when no event was accepted."""
    check_policy(ctx)
    uuids = list(dict.fromkeys(e["server_uuid"] for e in events))
    async with rt.db.reader() as s:
        found = (await s.execute(_TARGETS, {"b_uuids": uuids})).all()
    hosts = {u: h for u, h, _op, _t in found}
    operations = {u: op or "" for u, _h, op, _t in found}
    task_states = {u: t for u, _h, _op, t in found}
    response: list[dict] = []
    accepted: list[dict] = []
    result = 200
    for given in events:
        answer = dict(given)
        response.append(answer)
        uuid, name, tag = given["server_uuid"], given["name"], given.get("tag")
        status = given.get("status", "completed")
        if uuid not in hosts:
            LOG.debug("dropping event %s:%s for unknown instance %s", name, tag, uuid)
            answer.update(status="failed", code=404)
            result = 207
            continue
        if name in TAG_REQUIRED and tag is None:
            LOG.debug("event tag is missing for instance %s; dropping event %s", uuid, name)
            answer.update(status="failed", code=400)
            result = 207
            continue
        if not hosts[uuid]:
            LOG.debug("unable to find a host for instance %s; dropping event %s", uuid, name)
            answer.update(status="failed", code=422)
            result = 207
            continue
        LOG.info("creating event %s:%s for instance %s on %s", name, tag, uuid, hosts[uuid])
        answer.update(status="completed", code=200)
        accepted.append({"instance_uuid": uuid, "name": name, "tag": tag or "", "status": status,
                         "host": hosts[uuid]})
    if not accepted:
        # Nova: a batch none of whose events could be dispatched is 404 as a whole.
        raise exceptions.NotFound("No instances found for any event")
    # Nova dispatches a power-update only with a valid target power state (answered 200 regardless).
    dropped = [e for e in accepted if e["name"] == POWER_UPDATE and e["tag"] not in (POWER_ON, POWER_OFF)]
    for event in dropped:
        LOG.warning("invalid power state %s: cannot process the power-update event of instance %s; skipping it",
                    event["tag"], event["instance_uuid"])
    accepted = [e for e in accepted if e not in dropped]
    if not accepted:
        return response, result
    instance_uuids = list(dict.fromkeys(e["instance_uuid"] for e in accepted))
    now = utcnow()
    for event in accepted:
        # The operation the instance is in now: its compute host started it (and wrote it) before
        # anything that can cause this event, so an event of an earlier operation never counts.
        event["operation"] = operations.get(event["instance_uuid"], "")
    async with rt.db.transaction() as s:
        for event in accepted:
            if event["name"] == POWER_UPDATE:  # the action the compute host's power update is recorded in
                from nefos.objects import actions
                await actions.record_action(rt.db, ctx, event["instance_uuid"],
                                            actions.START if event["tag"] == POWER_ON else actions.STOP,
                                            session=s)
        await _store(s, [{"instance_uuid": e["instance_uuid"], "name": e["name"], "tag": e["tag"],
                          "operation": e["operation"], "status": e["status"], "host": e["host"],
                          "received_at": now} for e in accepted])
        await event_log.append(s, *(event_log.entry(
            event_log.EXTERNAL_EVENT, server_id=e["instance_uuid"], host=e["host"], name=e["name"],
            data={"tag": e["tag"] or None, "status": e["status"]}) for e in accepted))
        # Recorded as events of the server's current (latest) action, as Nova records no action of
        # its own for network-* events: clients counting a server's actions see the same ones.
        action_ids = dict((await s.execute(_LATEST_ACTIONS, {"b_uuids": instance_uuids})).all())
        recorded = []
        for event in accepted:
            event["action_id"] = action_ids.get(event["instance_uuid"])
            if event["action_id"] is not None:
                recorded.append({
                    "action_id": event["action_id"], "event": ACCEPTED_EVENT, "start_time": now,
                    "finish_time": now, "result": "Success", "created_at": now,
                    "details": (f"{event['name']}-{event['tag']} ({event['status']}) accepted, "
                                f"request {ctx.request_id}")[:2000]})
        if recorded:
            await s.execute(_INSERT_ACTION_EVENT, recorded)
    by_host: dict[str, list[dict]] = {}
    for event in accepted:
        # received_at: for the host's delivery-latency metric (a host that predates it ignores it).
        by_host.setdefault(event["host"], []).append(
            {**{k: event[k] for k in ("instance_uuid", "name", "tag", "status", "operation", "action_id")},
             "received_at": now.isoformat()})
    await _add_evacuation_destinations(rt, by_host, task_states)
    for host, host_events in by_host.items():
        try:
            await ComputeRPCAPI(rt.bus).external_instance_event(ctx, host, host_events)
        except Exception as exc:  # the host is down: the event waits in the inbox
            LOG.warning("cannot cast %d external event(s) to compute host %s (%s); they stay in its inbox",
                        len(host_events), host, exc)
    return response, result


async def _add_evacuation_destinations(rt, by_host: dict[str, list[dict]], task_states: dict) -> None:
    """A server being evacuated still names its failed host: its events go to the destination too,
    whose spawn awaits them (as Nova sends them to a migration context's destination)."""
    from nefos.control.compute.evacuate import destinations
    from nefos.model.migration_state import EVACUATION_TASK_STATES
    moving = {u for u, t in task_states.items() if t in EVACUATION_TASK_STATES}
    if not moving:
        return
    dests = await destinations(rt.db, moving)
    for events in list(by_host.values()):
        for event in events:
            dest = dests.get(event["instance_uuid"])
            if dest is not None:
                by_host.setdefault(dest, []).append(event)
