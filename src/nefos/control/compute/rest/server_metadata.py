"""``/v2.1/servers/{id}/metadata``: the server's key/value metadata."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest.servers import _METADATA
from nefos.control.compute.rest.validation import refuse_query_from_2102, validate
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

_METADATA_BODY = {"type": "object", "properties": {"metadata": _METADATA}, "required": ["metadata"],
                  "additionalProperties": False}
_META_ITEM_BODY = {"type": "object", "properties": {"meta": {
    "type": "object", "patternProperties": _METADATA["patternProperties"], "additionalProperties": False,
    "minProperties": 1, "maxProperties": 1}}, "required": ["meta"], "additionalProperties": False}


@router.get("/v2.1/servers/{server_id}/metadata")
@documented(responses={200: responses.METADATA})
async def list_metadata(request: Request, server_id: str):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:server-metadata:index")
    instance = await request.app.state.compute_api.get(rest.get_context(request), server_id)
    return {"metadata": instance.get("metadata") or {}}


async def _update(request: Request, server_id: str, replace: bool):
    authorize(rest.get_context(request),
              "os_compute_api:server-metadata:" + ("update_all" if replace else "create"))
    body = await rest.json_body(request)
    validate(body, _METADATA_BODY)
    metadata = await request.app.state.compute_api.update_metadata(
        rest.get_context(request), server_id, body["metadata"], replace=replace)
    return {"metadata": metadata}


@router.post("/v2.1/servers/{server_id}/metadata")
@documented(request=_METADATA_BODY, responses={200: responses.METADATA})
async def update_metadata(request: Request, server_id: str):
    return await _update(request, server_id, replace=False)


@router.put("/v2.1/servers/{server_id}/metadata")
@documented(request=_METADATA_BODY, responses={200: responses.METADATA})
async def replace_metadata(request: Request, server_id: str):
    return await _update(request, server_id, replace=True)


@router.get("/v2.1/servers/{server_id}/metadata/{key}")
@documented(responses={200: responses.METADATA_ITEM})
async def show_metadata_item(request: Request, server_id: str, key: str):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:server-metadata:show")
    instance = await request.app.state.compute_api.get(rest.get_context(request), server_id)
    metadata = instance.get("metadata") or {}
    if key not in metadata:
        raise exceptions.NotFound("Metadata item was not found")
    return {"meta": {key: metadata[key]}}


@router.put("/v2.1/servers/{server_id}/metadata/{key}")
@documented(request=_META_ITEM_BODY, responses={200: responses.METADATA_ITEM})
async def set_metadata_item(request: Request, server_id: str, key: str):
    authorize(rest.get_context(request), "os_compute_api:server-metadata:update")
    body = await rest.json_body(request)
    validate(body, _META_ITEM_BODY)
    if key not in body["meta"]:
        raise exceptions.ValidationError("Request body and URI mismatch")
    await request.app.state.compute_api.update_metadata(rest.get_context(request), server_id,
                                                       body["meta"], replace=False)
    return {"meta": body["meta"]}


@router.delete("/v2.1/servers/{server_id}/metadata/{key}")
@documented(responses={204: responses.NO_BODY})
async def delete_metadata_item(request: Request, server_id: str, key: str):
    authorize(rest.get_context(request), "os_compute_api:server-metadata:delete")
    await request.app.state.compute_api.delete_metadata_item(rest.get_context(request), server_id, key)
    return Response(status_code=204)
