"""``POST /v2.1/servers/{id}/action`` with ``os-getConsoleOutput``: the guest's serial console log."""

from __future__ import annotations

import re

from starlette.responses import JSONResponse

from nefos.control.compute.rest.validation import validate
from nefos.control.compute.authorization import authorize

SCHEMA = {
    "type": "object",
    "properties": {"os-getConsoleOutput": {
        "type": "object",
        "properties": {"length": {"type": ["integer", "string", "null"], "pattern": "^-?[0-9]+$",
                                  "minimum": -1}},  # -1 (or null): the whole log
        "additionalProperties": False}},
    "required": ["os-getConsoleOutput"],
    "additionalProperties": False,
}
_REMOVE = re.compile("[\x00-\x08\x0b-\x1f]")


async def console_output(request, ctx, server_id: str, body: dict) -> JSONResponse:
    authorize(ctx, "os_compute_api:os-console-output")
    validate(body, SCHEMA)
    length = body["os-getConsoleOutput"].get("length")
    if length is not None:
        length = int(length)
        if length == -1:
            length = None
    compute_api = request.app.state.compute_api
    output = await compute_api.get_console_output(ctx, server_id, length)
    return JSONResponse({"output": _REMOVE.sub("", output or "")})
