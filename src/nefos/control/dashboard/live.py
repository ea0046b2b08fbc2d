"""``GET /events``: the Compute API's event stream relayed to the page's ``EventSource`` (which can
send no token and may not reach another origin), with the user's token and the page's filter. The
browser's ``Last-Event-ID`` goes along, so a page that lost its connection misses nothing.

Relays hold their connections to the API for as long as the page is open, so they have a pool of
their own (the pages' API calls never wait behind them) and a budget: ``dashboard_max_streams_per_session``,
``dashboard_max_streams_per_user`` and ``dashboard_max_streams`` in all. Beyond it, and when the API
refuses the stream, the answer is a status, not a stream: an ``EventSource`` reconnects by itself
after a stream that ends, within seconds and for ever, but closes for good on any status but 200
(the page's script then tries again later, less often each time)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import httpx
from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from nefos.control.dashboard.sessions import COOKIE
from nefos.control.dashboard.web import cloud_of, is_uuid
from nefos.waiting import cancel_and_wait
from nefos.http_client import verified_tls

router = APIRouter()

_LAST_ID = re.compile(r"^[0-9]{1,18}$")
RETRY_AFTER = "30"  # seconds, when a refusal names none
HEADERS_TIMEOUT = 30.0  # for the Compute API to answer a stream's request


class StreamBudget:
    """The open relays, counted per session, per user and in all."""

    def __init__(self, per_session: int, per_user: int, total: int):
        self.per_session, self.per_user, self.total = per_session, per_user, total
        self._sessions: Counter[str] = Counter()
        self._users: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return self._users.total()

    def take(self, session_key: str, user_id: str) -> bool:
        if (self.open >= self.total or self._users[user_id] >= self.per_user
                or self._sessions[session_key] >= self.per_session):
            return False
        self._sessions[session_key] += 1
        self._users[user_id] += 1
        return True

    def give_back(self, session_key: str, user_id: str) -> None:
        for counts, key in ((self._sessions, session_key), (self._users, user_id)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]


def set_up(app, cfg) -> None:
    app.state.stream_budget = StreamBudget(cfg.dashboard_max_streams_per_session,
                                           cfg.dashboard_max_streams_per_user, cfg.dashboard_max_streams)
    # The budget is checked first: a relay never waits for a connection of this pool.
    app.state.relay_http = httpx.AsyncClient(
        verify=verified_tls(), timeout=httpx.Timeout(30.0, read=None),
        limits=httpx.Limits(max_connections=cfg.dashboard_max_streams, max_keepalive_connections=20))


def _refused(status: int, retry_after: str | None = None) -> Response:
    headers = {"Retry-After": retry_after} if retry_after else {}
    return Response(f"The live event stream is refused ({status}).\n", status_code=status, headers=headers,
                    media_type="text/plain")


class _Relay(StreamingResponse):
    """The upstream stream's bytes; once the response ends, however it ends (the page left, the
    console stopping, the API ending the stream), the upstream connection is closed and the budget
    given back."""

    def __init__(self, content, release):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._release()


@router.get("/events", include_in_schema=False)
async def events(request: Request, of: str = "servers", server: str | None = None):
    """``of``: ``servers`` (the project's), ``server`` (one: ``server``) or ``hosts``."""
    cloud = cloud_of(request)
    params: dict[str, str] = {}
    if of == "hosts":
        params["type"] = "host"
    elif of == "server" and is_uuid(server):
        params.update(server_id=server, type="server")
    else:
        params.update(project_id=cloud.session.project_id, type="server")
    headers = cloud.headers("compute")
    last = request.headers.get("last-event-id", "")
    if _LAST_ID.match(last):
        headers["Last-Event-ID"] = last
    url = cloud.url("compute", "/nefos-events")

    state = request.app.state
    session_key, user_id = request.cookies.get(COOKIE, ""), cloud.session.user_id
    if not state.stream_budget.take(session_key, user_id):
        return _refused(429, RETRY_AFTER)
    upstream: httpx.Response | None = None
    held = True

    async def release() -> None:
        nonlocal held
        if held:
            held = False
            state.stream_budget.give_back(session_key, user_id)
            if upstream is not None:
                await upstream.aclose()

    try:
        # The stream's body may be quiet for long (read=None), its answer may not.
        async with asyncio.timeout(HEADERS_TIMEOUT):
            upstream = await state.relay_http.send(
                state.relay_http.build_request("GET", url, headers=headers, params=params), stream=True)
    except (httpx.TransportError, TimeoutError):
        await release()
        return _refused(503, RETRY_AFTER)
    except BaseException:
        await release()
        raise
    if upstream.status_code != 200:
        status, retry_after = upstream.status_code, upstream.headers.get("retry-after")
        await release()
        if status == 401:  # the token is no longer valid: nor is the session
            state.sessions.remove(session_key)
            return _refused(401)
        if status in (429, 503):  # the API's own bounds: as it says, when to ask again
            return _refused(status, retry_after or RETRY_AFTER)
        return _refused(403 if status == 403 else 502, RETRY_AFTER)
    return _Relay(_relayed(upstream, state.stopping), release)


async def _relayed(upstream: httpx.Response, stopping: asyncio.Event):
    """The upstream's bytes as they come, until it ends or the console stops (the page reconnects)."""
    chunks = upstream.aiter_raw()
    stop = asyncio.ensure_future(stopping.wait())
    following = None
    try:
        while True:
            following = asyncio.ensure_future(anext(chunks))
            await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():  # the console is stopping
                return
            try:
                chunk = following.result()
            except (StopAsyncIteration, httpx.TransportError):
                return
            yield chunk
    finally:
        await cancel_and_wait(stop, following)
