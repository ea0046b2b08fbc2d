"""``/v2.1/servers/{id}/tags`` (2.26): the server's tags, listed, replaced, added, checked and removed
one by one or all at once. From 2.52 a server can also be created with its tags."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest.common import base_url
from nefos.control.compute.rest.servers import MAX_TAGS, _TAG
from nefos.control.compute.rest.validation import validate
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

_TAGS_BODY = {"type": "object", "properties": {"tags": {"type": "array", "items": _TAG, "maxItems": MAX_TAGS}},
              "required": ["tags"], "additionalProperties": False}


def _context(request: Request, action: str):
    if not request.state.api_version.matches("2.26"):
        raise exceptions.NotFound("The resource could not be found.")
    ctx = rest.get_context(request)
    authorize(ctx, f"os_compute_api:os-server-tags:{action}")
    return ctx


def _compute_api(request: Request):
    return request.app.state.compute_api


@router.get("/v2.1/servers/{server_id}/tags")
@documented(responses={200: responses.TAGS})
async def list_tags(request: Request, server_id: str):
    ctx = _context(request, "index")
    return {"tags": (await _compute_api(request).get(ctx, server_id)).get("tags") or []}


@router.put("/v2.1/servers/{server_id}/tags")
@documented(request=_TAGS_BODY, responses={200: responses.TAGS})
async def replace_tags(request: Request, server_id: str):
    ctx = _context(request, "update_all")
    body = await rest.json_body(request)
    validate(body, _TAGS_BODY)
    return {"tags": await _compute_api(request).set_tags(ctx, server_id, list(dict.fromkeys(body["tags"])))}


@router.delete("/v2.1/servers/{server_id}/tags")
@documented(responses={204: responses.NO_BODY})
async def delete_tags(request: Request, server_id: str):
    ctx = _context(request, "delete_all")
    await _compute_api(request).set_tags(ctx, server_id, [])
    return Response(status_code=204)


@router.get("/v2.1/servers/{server_id}/tags/{tag}")
@documented(responses={204: responses.NO_BODY})
async def check_tag(request: Request, server_id: str, tag: str):
    ctx = _context(request, "show")
    if tag not in ((await _compute_api(request).get(ctx, server_id)).get("tags") or []):
        raise exceptions.NotFound(f"Tag {tag} was not found on instance {server_id}")
    return Response(status_code=204)


@router.put("/v2.1/servers/{server_id}/tags/{tag}")
@documented(responses={201: responses.NO_BODY, 204: responses.NO_BODY})
async def add_tag(request: Request, server_id: str, tag: str):
    ctx = _context(request, "update")
    validate(tag, _TAG)
    tags = (await _compute_api(request).get(ctx, server_id)).get("tags") or []
    if tag in tags:
        return Response(status_code=204)
    if len(tags) >= MAX_TAGS:
        raise exceptions.ValidationError(f"The number of tags exceeded the per-server limit {MAX_TAGS}")
    await _compute_api(request).set_tags(ctx, server_id, [*tags, tag])
    return Response(status_code=201,
                    headers={"Location": f"{base_url(request)}/v2.1/servers/{server_id}/tags/{tag}"})


@router.delete("/v2.1/servers/{server_id}/tags/{tag}")
@documented(responses={204: responses.NO_BODY})
async def delete_tag(request: Request, server_id: str, tag: str):
    ctx = _context(request, "delete")
    tags = (await _compute_api(request).get(ctx, server_id)).get("tags") or []
    if tag not in tags:
        raise exceptions.NotFound(f"Tag {tag} was not found on instance {server_id}")
    await _compute_api(request).set_tags(ctx, server_id, [t for t in tags if t != tag])
    return Response(status_code=204)
