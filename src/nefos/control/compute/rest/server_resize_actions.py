"""``POST /v2.1/servers/{id}/action``: ``resize``, ``confirmResize``, ``revertResize`` and ``migrate``
(Nova's servers and migrate-server controllers; the work is in ``nefos.control.compute.resize``).

Answers as Nova's: resize 202, confirmResize 204, revertResize 202, migrate 202; 404 for an unknown
server (looked up before the policy check, as Nova); 400 for a bad body, an unknown flavor, the
same flavor, a flavor with no disk for a server with one, a flavor too small for the image, no
valid host, an unknown or the same host; 403 over quota (the upsize's cores and RAM); 409 for a
locked server, a wrong state, a compute host down, or a host whose driver cannot resize
(``ResizeNotSupported``: the libvirt driver, for now).
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from nefos import exceptions
from nefos.control.compute.rest.validation import validate
from nefos.control.compute import disk_config
from nefos.control.compute.authorization import authorize

_RESIZE_SCHEMA = {"type": "object", "properties": {"resize": {
    "type": "object", "properties": {
        "flavorRef": {"type": ["string", "integer"], "minLength": 1},
        "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]}},
    "required": ["flavorRef"], "additionalProperties": False}},
    "required": ["resize"], "additionalProperties": False}
_MIGRATE_SCHEMA_256 = {"type": "object", "properties": {"migrate": {
    "type": ["object", "null"], "properties": {"host": {
        "type": ["string", "null"], "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9-._]*$"}},
    "additionalProperties": False}}, "required": ["migrate"], "additionalProperties": False}


def _compute_api(request: Request):
    return request.app.state.compute_api


async def _target(request: Request, ctx, server_id: str) -> dict:
    instance = await _compute_api(request).get(ctx, server_id)  # 404 first, as Nova
    return {"project_id": instance["project_id"], "user_id": instance["user_id"]}


async def resize(request: Request, ctx, server_id: str, body: dict) -> Response:
    validate(body, _RESIZE_SCHEMA)
    authorize(ctx, "os_compute_api:servers:resize", await _target(request, ctx, server_id))
    flavor_ref = str(body["resize"]["flavorRef"]).rstrip("/").rsplit("/", 1)[-1]
    auto_disk_config = disk_config.from_api(body["resize"].get("OS-DCF:diskConfig"))
    await _compute_api(request).resize(ctx, server_id, flavor_ref, auto_disk_config=auto_disk_config)
    return Response(status_code=202)


async def confirm_resize(request: Request, ctx, server_id: str, body: dict) -> Response:
    authorize(ctx, "os_compute_api:servers:confirm_resize", await _target(request, ctx, server_id))
    await _compute_api(request).confirm_resize(ctx, server_id)
    return Response(status_code=204)


async def revert_resize(request: Request, ctx, server_id: str, body: dict) -> Response:
    authorize(ctx, "os_compute_api:servers:revert_resize", await _target(request, ctx, server_id))
    await _compute_api(request).revert_resize(ctx, server_id)
    return Response(status_code=202)


async def migrate(request: Request, ctx, server_id: str, body: dict) -> Response:
    v256 = request.state.api_version.matches("2.56")
    if v256:  # before 2.56 Nova validates nothing in the body (Tempest sends {})
        validate(body, _MIGRATE_SCHEMA_256)
    target = await _target(request, ctx, server_id)
    authorize(ctx, "os_compute_api:os-migrate-server:migrate", target)
    host = (body["migrate"] or {}).get("host") if v256 else None  # a host before 2.56 is ignored
    if host:
        authorize(ctx, "os_compute_api:os-migrate-server:migrate:host", target)
    await _compute_api(request).migrate(ctx, server_id, host)
    return Response(status_code=202)


HANDLERS = {"resize": resize, "confirmResize": confirm_resize, "revertResize": revert_resize, "migrate": migrate}
