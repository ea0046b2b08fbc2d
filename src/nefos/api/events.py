"""``GET /v2.1/nefos-events``: the cloud's changes as they happen, as Server-Sent Events (like
Incus's ``/1.0/events``; Nova has no such resource, its clients poll).

Each event is one SSE message whose ``id`` is the entry's id in the durable log
(``objects/event_log.py``), whose ``event`` is its type (``server.updated``, ``host.down``, ...)
and whose ``data`` is a JSON object: ``id``, ``type``, ``time``, ``server_id``, ``project_id``,
``host``, ``name`` and the type's own fields. A client that lost its connection sends back the
last id it saw as ``Last-Event-ID`` (browsers' EventSource do) or ``last_event_id``, and gets
every event after it that the log still keeps (``event_log_retention``); a ``stream.truncated``
event first tells it when the log no longer goes back that far. The first message,
``stream.connected`` (no id), says the stream is live and the last id before it.

Who sees what, as the resources themselves: a project reader sees its project's servers'
events; ``all_projects`` (admin) every project's; host events, and the ``host`` of a server's
event, are for whoever may list services (admin), as Nova shows a server's host to admins only
(everyone gets ``host_id``, Nova's ``hostId``). Filters: ``server_id``, ``type`` (a type or its family: ``server.step``, ``host``), ``project_id``.
``timeout``: close the stream after that many seconds (a client that only wants what happened).
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from nefos import exceptions, policy
from nefos.api import common, event_hub, server_view
from nefos.api import response_schemas as responses
from nefos.api.validation import query_schema, validate_query
from nefos.objects import event_log
from nefos.openapi import documented

router = APIRouter()

STREAM_RULE = "nefos:events:stream"
ALL_PROJECTS_RULE = "nefos:events:stream:all_projects"
HOSTS_RULE = "nefos:events:stream:hosts"

KEEPALIVE = 15.0
_MAX_TIMEOUT = 86400
_TYPE_FAMILIES = sorted({t.rsplit(".", 1)[0] for t in event_log.TYPES} | {t.split(".", 1)[0] for t in event_log.TYPES})

QUERY = query_schema({
    "server_id": {"type": "string", "format": "uuid"},
    "type": {"type": "string", "enum": sorted(event_log.TYPES) + _TYPE_FAMILIES},
    "project_id": {"type": "string", "minLength": 1, "maxLength": 255},
    "last_event_id": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    "timeout": {"type": "string", "pattern": "^[0-9]{1,5}(\\.[0-9]{1,3})?$"},
}, strict=True, single=("last_event_id", "timeout"))


def _matches(types: set[str], kind: str) -> bool:
    return kind in types or kind.rsplit(".", 1)[0] in types or kind.split(".", 1)[0] in types


def _filter(request: Request, ctx) -> tuple:
    params = request.query_params
    servers = set(params.getlist("server_id"))
    types = set(params.getlist("type"))
    projects = set(params.getlist("project_id"))
    all_projects = policy.check(ctx, ALL_PROJECTS_RULE)
    if not all_projects:
        if projects - {ctx.project_id}:
            policy.enforce(ctx, ALL_PROJECTS_RULE)
        projects = {ctx.project_id}
    sees_hosts = policy.check(ctx, HOSTS_RULE)

    def accepts(entry: dict) -> bool:
        if entry["server_id"] is None:  # a host's event
            return sees_hosts and not servers and not (projects and all_projects) and (
                not types or _matches(types, entry["type"]))
        if projects and entry["project_id"] not in projects:
            return False
        if servers and entry["server_id"] not in servers:
            return False
        return not types or _matches(types, entry["type"])

    # A client of one project resumes from rows of that project only.
    only_project = next(iter(projects)) if len(projects) == 1 and not sees_hosts else None
    return accepts, sees_hosts, only_project


def _message(entry: dict, sees_hosts: bool) -> bytes:
    """The entry as one SSE message; encoded once per entry and view, whatever the number of clients
    (the reader hands the same entry to each)."""
    key = "_sse_with_host" if sees_hosts else "_sse"
    encoded = entry.get(key)
    if encoded is None:
        body = {"id": entry["id"], "type": entry["type"], "time": entry["created_at"],
                "server_id": entry["server_id"], "project_id": entry["project_id"],
                "host": entry["host"] if sees_hosts else None, "name": entry["name"], **(entry["data"] or {})}
        if entry["server_id"] is not None:  # Nova's hostId: which servers share a host, not which host
            body["host_id"] = server_view.host_id(entry)
        encoded = entry[key] = (f"id: {entry['id']}\nevent: {entry['type']}\ndata: "
                                f"{json.dumps(body, separators=(',', ':'))}\n\n").encode()
    return encoded


def _resume_point(request: Request) -> int | None:
    given = request.query_params.get("last_event_id") or request.headers.get("last-event-id")
    if given is None:
        return None
    if not given.isdigit() or len(given) > 18:
        raise exceptions.ValidationError("Invalid Last-Event-ID: it must be an event's id.")
    return int(given)


@router.get("/v2.1/nefos-events")
@documented(responses={200: responses.EVENT_STREAM}, query=QUERY, response_media_type="text/event-stream")
async def stream_events(request: Request):
    ctx = common.authorize(request, STREAM_RULE)
    validate_query(request.query_params, QUERY)
    accepts, sees_hosts, only_project = _filter(request, ctx)
    resume_after = _resume_point(request)
    timeout = request.query_params.get("timeout")
    deadline = None if timeout is None else time.monotonic() + min(float(timeout), _MAX_TIMEOUT)
    rt = request.app.state.rt
    hub = event_hub.hub_of(request.app)

    async def messages():
        subscriber = await hub.subscribe(accepts)
        try:
            # The headers and a first message at once: the client knows it is connected, and from where.
            yield (b"event: stream.connected\ndata: "
                   + json.dumps({"last_event_id": subscriber.start}).encode() + b"\n\n")
            if resume_after is not None and resume_after < subscriber.start:
                oldest = await event_log.oldest_id(rt.db)
                if oldest is None or oldest > resume_after + 1:
                    yield (b"event: stream.truncated\ndata: "
                           + json.dumps({"last_event_id": resume_after, "oldest_kept": oldest}).encode() + b"\n\n")
                after = resume_after
                while after < subscriber.start:
                    page = await event_log.read_after(rt.db, after, upto=subscriber.start, project_id=only_project)
                    if not page:
                        break
                    for entry in page:
                        if accepts(entry):
                            yield _message(entry, sees_hosts)
                    after = page[-1]["id"]
            while True:
                wait = KEEPALIVE if deadline is None else min(KEEPALIVE, deadline - time.monotonic())
                if wait <= 0:
                    return
                try:
                    entry = await asyncio.wait_for(subscriber.queue.get(), wait)
                except TimeoutError:
                    if deadline is None or time.monotonic() < deadline:
                        yield b": keepalive\n\n"
                    continue
                # What else is queued goes in the same write: one send for a burst, not one per event.
                batch = [entry]
                while batch[-1] not in (event_hub.END, event_hub.OVERFLOW) and not subscriber.queue.empty():
                    batch.append(subscriber.queue.get_nowait())
                out = b"".join(_message(e, sees_hosts) for e in batch
                               if isinstance(e, dict) and (resume_after is None or e["id"] > resume_after))
                if out:
                    yield out
                if batch[-1] is event_hub.OVERFLOW:
                    yield b"event: stream.overflow\ndata: {}\n\n"
                    return
                if batch[-1] is event_hub.END:
                    return
        finally:
            hub.unsubscribe(subscriber)

    return StreamingResponse(messages(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
