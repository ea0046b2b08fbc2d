"""``POST /v2.1/servers/{id}/action`` ``rescue`` and ``unrescue`` (Nova's ``rescue`` API).

``rescue`` (body null or {adminPass, rescue_image_ref}) answers 200 with the rescue guest's
``adminPass`` (the one given, else a generated one; ``{}`` with enable_instance_password off, as
Nova, and then only a given one reaches the rescue guest), which the driver gives the rescue guest
(libvirt: on the rescue guest's config drive, ``nefos.host.virt.libvirt.rescue``); ``unrescue`` answers 202. As in Nova the body
is validated first (400), the server looked up (404), then the policy checked
(``os_compute_api:os-rescue`` / ``os-unrescue``, for the server's project); wrong states answer 409
(``nefos.control.compute.rescue``, the host's ``nefos.host.compute.rescue``). From 2.87 Nova also rescues
volume-backed servers whose rescue image asks for a stable rescue; Nefos servers are never
volume-backed, so every version behaves alike.
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import JSONResponse, Response

from nefos.control.compute.rest.validation import validate
from nefos.control.compute import rescue as rescue_api
from nefos.control.compute.authorization import authorize

RESCUE_SCHEMA = {"type": "object", "properties": {"rescue": {
    "type": ["object", "null"], "properties": {
        "adminPass": {"type": "string"},
        "rescue_image_ref": {"type": "string", "format": "uuid"}},
    "additionalProperties": False}}, "required": ["rescue"], "additionalProperties": False}
# Nova reads nothing of unrescue's argument (clients send null or {}).
UNRESCUE_SCHEMA = {"type": "object", "properties": {"unrescue": {"type": ["object", "null"]}},
                   "required": ["unrescue"], "additionalProperties": False}


def _compute_api(request: Request):
    return request.app.state.compute_api


async def rescue(request: Request, ctx, server_id: str, body: dict) -> Response:
    from nefos.control.compute.rest.servers import _admin_password
    validate(body, RESCUE_SCHEMA)
    args = body["rescue"] or {}
    instance = await _compute_api(request).get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-rescue",
              {"user_id": instance["user_id"], "project_id": instance["project_id"]})
    password = _admin_password(request, args)
    await rescue_api.request_rescue(_compute_api(request), ctx, server_id, password=password,
                                    rescue_image_ref=args.get("rescue_image_ref"))
    # Nova's rescue answers the password only with enable_instance_password.
    answer = {"adminPass": password} if request.app.state.rt.cfg.enable_instance_password else {}
    return JSONResponse(answer, status_code=200)


async def unrescue(request: Request, ctx, server_id: str, body: dict) -> Response:
    validate(body, UNRESCUE_SCHEMA)
    instance = await _compute_api(request).get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-unrescue", {"project_id": instance["project_id"]})
    await rescue_api.request_unrescue(_compute_api(request), ctx, server_id)
    return Response(status_code=202)


HANDLERS = {"rescue": rescue, "unrescue": unrescue}
