"""``GET /events``: the Compute API's event stream relayed to the page's ``EventSource`` (which can
send no token and may not reach another origin), with the user's token and the page's filter. The
browser's ``Last-Event-ID`` goes along, so a page that lost its connection misses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import re

import httpx
from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from nefos.dashboard.web import cloud_of, is_uuid

router = APIRouter()

_LAST_ID = re.compile(r"^[0-9]{1,18}$")


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
    stopping: asyncio.Event = request.app.state.stopping
    url = cloud.url("compute", "/nefos-events")

    async def relay():
        async with cloud.http.stream("GET", url, headers=headers, params=params,
                                     timeout=httpx.Timeout(30.0, read=None)) as upstream:
            if upstream.status_code != 200:
                yield b"event: stream.refused\ndata: {\"status\": %d}\n\n" % upstream.status_code
                return
            chunks = upstream.aiter_raw()
            stop = asyncio.ensure_future(stopping.wait())
            try:
                while True:
                    following = asyncio.ensure_future(anext(chunks))
                    await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if not following.done():  # the console is stopping: end, the page reconnects
                        following.cancel()
                        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                            await following
                        return
                    try:
                        yield following.result()
                    except StopAsyncIteration:
                        return
            finally:
                stop.cancel()

    return StreamingResponse(relay(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
