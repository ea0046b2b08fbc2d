"""``POST /v2.1/os-server-external-events``: events about servers from other services (Neutron's notifier).

The body is validated against Nova's schema for the request's microversion
(400); the caller needs the ``service`` (or ``admin``) role (403); each event
is then answered on its own: 200 when all were accepted, 207 when some were,
404 when none was (``nefos.control.compute.external_events``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from nefos import rest
from nefos.control.compute.rest.validation import validate
from nefos.control.compute import external_events
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.rest import microversion

router = APIRouter()


@router.post("/v2.1/os-server-external-events")
@documented(request=lambda: external_events.request_schema(microversion.MIN),
            responses={200: responses.EXTERNAL_EVENTS, 207: responses.EXTERNAL_EVENTS})
async def create(request: Request):
    ctx = rest.get_context(request)
    body = await rest.json_body(request)
    validate(body, external_events.request_schema(getattr(request.state, "api_version", None)))
    events, code = await external_events.create(request.app.state.rt, ctx, body["events"])
    return JSONResponse({"events": events}, status_code=code)
