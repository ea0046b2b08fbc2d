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

An open stream keeps its caller's authority in check: every ``event_stream_reauth_interval``
seconds (60) and when its token expires it authorizes its request again, exactly as the request
was (the token validated, revocations included, then ``nefos:events:stream`` and the filter's
rules), and ends with a last message, ``stream.closed``, once that fails, as Keystone refuses a
revoked or expired token: ``reason`` ``token_expired``, ``unauthorized`` (revoked: a role
removed, a user or project disabled, the token deleted), ``forbidden`` (policy no longer allows
the stream) or ``unavailable`` (the check could not be made: the client reconnects with
``Last-Event-ID``). Each API process serves at most ``event_stream_max_clients`` streams,
``event_stream_max_per_user`` of them to one user: one more is 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import time

from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from nefos import exceptions, policy, rest
from nefos.control.compute.rest import event_hub, server_view
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import query_schema, validate_query
from nefos.db.retry import transient_error
from nefos.clients.identity import tokens
from nefos.objects import event_log
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

STREAM_RULE = "nefos:events:stream"
ALL_PROJECTS_RULE = "nefos:events:stream:all_projects"
HOSTS_RULE = "nefos:events:stream:hosts"

KEEPALIVE = 15.0
# The stream's own messages, besides the log's entries (event_log.TYPES); none has an id.
STREAM_CONNECTED = "stream.connected"
STREAM_TRUNCATED = "stream.truncated"
STREAM_OVERFLOW = "stream.overflow"
STREAM_CLOSED = "stream.closed"
# A token's expiry is checked just after it: the check then sees the token expired.
_PAST_EXPIRY = 0.01
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
            authorize(ctx, ALL_PROJECTS_RULE)
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


def _stream_message(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _token_expiry(rt, ctx) -> float | None:
    """When the caller's token expires (seconds since the epoch); None without a token (noauth)."""
    return tokens.expires_at(rt.cfg, ctx.auth_token) if ctx.auth_token else None


async def _reauthorize(request: Request, ctx, token_expiry: float | None) -> tuple[tuple | None, dict | None]:
    """The stream's request authorized again as it was at first: a fresh context from its token
    (expiry and revocation checked), the stream's rule, the filter's rules. Gives the filter to use
    from now on, or the ``stream.closed`` data saying why the stream ends."""
    try:
        request.state.context = await rest.authenticated_context(request, ctx.request_id, ctx.global_request_id)
        fresh = authorize(rest.get_context(request), STREAM_RULE)
        return _filter(request, fresh), None
    except exceptions.Unauthorized as exc:
        expired = token_expiry is not None and time.time() >= token_expiry
        return None, {"reason": "token_expired" if expired else "unauthorized", "message": str(exc)}
    except exceptions.NotAuthorized as exc:
        return None, {"reason": "forbidden", "message": str(exc)}
    except Exception as exc:
        # The revocations could not be read (the database away): no authority without the check.
        # The client reconnects with Last-Event-ID and misses nothing.
        transient = transient_error(exc)
        if transient is None:
            raise
        return None, {"reason": "unavailable", "message": str(transient)}


class _AdmittedStream(StreamingResponse):
    """A streamed response that gives its place (``EventHub.admit``) back however it ends:
    finished, cut by its client, or cut before its first byte."""

    def __init__(self, content, release, **kwargs):
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


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
    ctx = authorize(rest.get_context(request), STREAM_RULE)
    validate_query(request.query_params, QUERY)
    accepts, sees_hosts, only_project = _filter(request, ctx)
    resume_after = _resume_point(request)
    timeout = request.query_params.get("timeout")
    deadline = None if timeout is None else time.monotonic() + min(float(timeout), _MAX_TIMEOUT)
    rt = request.app.state.rt
    hub = event_hub.hub_of(request.app)
    token_expiry = _token_expiry(rt, ctx)
    reauth_interval = rt.cfg.event_stream_reauth_interval

    def next_check() -> float:
        """The monotonic time of the next check of the caller: an interval on, or the token's expiry."""
        wait = reauth_interval
        if token_expiry is not None:
            wait = min(wait, max(token_expiry - time.time(), 0.0) + _PAST_EXPIRY)
        return time.monotonic() + wait

    async def messages():
        nonlocal accepts, sees_hosts
        subscriber = await hub.subscribe(accepts)
        try:
            # The headers and a first message at once: the client knows it is connected, and from where.
            yield _stream_message(STREAM_CONNECTED, {"last_event_id": subscriber.start})
            if resume_after is not None and resume_after < subscriber.start:
                oldest = await event_log.oldest_id(rt.db)
                if oldest is None or oldest > resume_after + 1:
                    yield _stream_message(STREAM_TRUNCATED, {"last_event_id": resume_after, "oldest_kept": oldest})
                after = resume_after
                while after < subscriber.start:
                    page = await event_log.read_after(rt.db, after, upto=subscriber.start, project_id=only_project)
                    if not page:
                        break
                    for entry in page:
                        if accepts(entry):
                            yield _message(entry, sees_hosts)
                    after = page[-1]["id"]
            check_at = next_check()
            quiet_since = time.monotonic()
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return
                if now >= check_at:
                    view, closed = await _reauthorize(request, ctx, token_expiry)
                    if closed is not None:
                        yield _stream_message(STREAM_CLOSED, closed)
                        return
                    # The rules may have changed meanwhile (policy.yaml): the filter follows them.
                    accepts, sees_hosts, _ = view
                    subscriber.accepts = accepts
                    check_at = next_check()
                    continue
                wait = min(quiet_since + KEEPALIVE, check_at, deadline or check_at) - now
                try:
                    entry = await asyncio.wait_for(subscriber.queue.get(), max(wait, 0.0))
                except TimeoutError:
                    if time.monotonic() - quiet_since >= KEEPALIVE:
                        quiet_since = time.monotonic()
                        yield b": keepalive\n\n"
                    continue
                # What else is queued goes in the same write: one send for a burst, not one per event.
                batch = [entry]
                while batch[-1] not in (event_hub.END, event_hub.OVERFLOW) and not subscriber.queue.empty():
                    batch.append(subscriber.queue.get_nowait())
                out = b"".join(_message(e, sees_hosts) for e in batch
                               if isinstance(e, dict) and (resume_after is None or e["id"] > resume_after))
                if out:
                    quiet_since = time.monotonic()
                    yield out
                if batch[-1] is event_hub.OVERFLOW:
                    yield _stream_message(STREAM_OVERFLOW, {})
                    return
                if batch[-1] is event_hub.END:
                    return
        finally:
            hub.unsubscribe(subscriber)

    # Last, with nothing between it and the response that gives the place back.
    release = hub.admit(ctx.user_id or "")
    return _AdmittedStream(messages(), release, media_type="text/event-stream",
                           headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
