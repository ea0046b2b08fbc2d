"""Volume routes of a cloud without a block storage service: the server's volume attachments
(``/servers/{id}/os-volume_attachments``) and the ``os-volumes`` / ``os-snapshots`` proxies
(404 from 2.36, as Nova stopped proxying there).

Nefos has no Cinder: no volume or snapshot exists. So, deciding what Nova would answer with a
volume service that holds nothing (rather than its 500 for an unreachable Cinder):

* a server's attachments are read from its own block device mappings (as Nova's are): 200 with
  none; one named by volume id is 404 "not attached"; attaching, swapping or detaching a volume
  is 404 for the volume (Nova's VolumeNotFound);
* the proxies list nothing (200), show and delete 404; creating a volume is 403, as for a project whose volume quota is 0 (nothing could
  create one; 404 for the snapshot it names, if any); creating a snapshot is 404 for its volume.

Bodies are validated first (400), then the server is looked up in the caller's project (404),
then policy (Nova's rule names and defaults), as Nova does.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import (BOOLEAN, DEVICE_TAG, NON_NEGATIVE_INTEGER, UUID, query_schema, validate,
                                  validate_query)
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_PROXY_MAX = "2.35"
_ATTACHMENT = {"volumeId": UUID,
               "device": {"type": ["string", "null"], "pattern": "(^/dev/x{0,1}[a-z]{0,1}d{0,1})([a-z]+)[0-9]*$"}}


def _wrapped(key: str, properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": {key: {"type": "object", "properties": properties,
                                                  "required": required, "additionalProperties": False}},
            "required": [key], "additionalProperties": False}


ATTACH = _wrapped("volumeAttachment", _ATTACHMENT, ["volumeId"])
ATTACH_V249 = _wrapped("volumeAttachment", {**_ATTACHMENT, "tag": DEVICE_TAG}, ["volumeId"])
ATTACH_V279 = _wrapped("volumeAttachment", {**_ATTACHMENT, "tag": DEVICE_TAG, "delete_on_termination": BOOLEAN},
                       ["volumeId"])
UPDATE = _wrapped("volumeAttachment", {"volumeId": UUID}, ["volumeId"])
UPDATE_V285 = _wrapped("volumeAttachment", {
    "volumeId": UUID, "id": UUID, "serverId": UUID, "device": {"type": ["string", "null"]},
    "tag": DEVICE_TAG, "delete_on_termination": BOOLEAN}, ["volumeId"])
_LIST_QUERY = {"limit": NON_NEGATIVE_INTEGER, "offset": NON_NEGATIVE_INTEGER}
LIST_QUERY, LIST_QUERY_V275 = query_schema(_LIST_QUERY, strict=False), query_schema(_LIST_QUERY, strict=True)
VOLUME_CREATE = _wrapped("volume", {
    "volume_type": {"type": "string"}, "metadata": {"type": "object"}, "snapshot_id": UUID,
    "size": {"type": ["integer", "string"], "pattern": "^[0-9]+$", "minimum": 1},
    "availability_zone": {"type": "string"}, "display_name": {"type": ["string", "null"]},
    "display_description": {"type": ["string", "null"]}}, ["size"])
SNAPSHOT_CREATE = _wrapped("snapshot", {
    "volume_id": {"type": "string"}, "force": BOOLEAN, "display_name": {"type": "string"},
    "display_description": {"type": "string"}}, ["volume_id"])


async def _server(request: Request, server_id: str, rule: str) -> dict:
    ctx = rest.get_context(request)
    instance = await request.app.state.compute_api.get(ctx, server_id)
    authorize(ctx, f"os_compute_api:os-volumes-attachments:{rule}", {"project_id": instance["project_id"]})
    return instance


def _volume_not_found(volume_id: str):
    return exceptions.NotFound(f"Volume {volume_id} could not be found.")


def _not_attached(server_id: str, volume_id: str):
    return exceptions.NotFound(f"Instance {server_id} is not attached to volume {volume_id}")


@router.get("/v2.1/servers/{server_id}/os-volume_attachments")
@documented(query=LIST_QUERY, responses={200: responses.VOLUME_ATTACHMENTS})
async def list_attachments(request: Request, server_id: str):
    validate_query(request.query_params,
                   LIST_QUERY_V275 if request.state.api_version.matches("2.75") else LIST_QUERY)
    await _server(request, server_id, "index")
    return {"volumeAttachments": []}  # no volume is ever attached: no block storage service


@router.post("/v2.1/servers/{server_id}/os-volume_attachments")
@documented(request=ATTACH, responses={200: responses.VOLUME_ATTACHMENT})
async def attach_volume(request: Request, server_id: str):
    version = request.state.api_version
    body = await rest.json_body(request)
    validate(body, ATTACH_V279 if version.matches("2.79") else ATTACH_V249 if version.matches("2.49") else ATTACH)
    await _server(request, server_id, "create")
    raise _volume_not_found(body["volumeAttachment"]["volumeId"])


@router.get("/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}")
@documented(responses={200: responses.VOLUME_ATTACHMENT})
async def show_attachment(request: Request, server_id: str, volume_id: str):
    await _server(request, server_id, "show")
    raise _not_attached(server_id, volume_id)


@router.put("/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}")
@documented(request=UPDATE, responses={202: responses.NO_BODY})
async def update_attachment(request: Request, server_id: str, volume_id: str):
    body = await rest.json_body(request)
    if request.state.api_version.matches("2.85"):
        validate(body, UPDATE_V285)
        await _server(request, server_id, "update")
        raise _not_attached(server_id, volume_id)
    validate(body, UPDATE)
    ctx = rest.get_context(request)
    await request.app.state.compute_api.get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-volumes-attachments:swap", {})  # before 2.85 only a swap
    raise _volume_not_found(volume_id)


@router.delete("/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}")
@documented(responses={202: responses.NO_BODY})
async def detach_volume(request: Request, server_id: str, volume_id: str):
    await _server(request, server_id, "delete")
    raise _volume_not_found(volume_id)


# The os-volumes and os-snapshots proxies (to 2.35) ------------------------------------------------

def _proxy(request: Request, rule: str):
    microversion.require_at_most(request, _PROXY_MAX)
    ctx = rest.get_context(request)
    authorize(ctx, f"os_compute_api:os-volumes:{rule}", {"project_id": ctx.project_id})
    return ctx


@router.get("/v2.1/os-volumes")
@documented(responses={200: responses.VOLUMES})
async def list_volumes(request: Request):
    _proxy(request, "list")
    return {"volumes": []}


@router.get("/v2.1/os-volumes/detail")
@documented(responses={200: responses.VOLUMES})
async def list_volumes_detail(request: Request):
    _proxy(request, "detail")
    return {"volumes": []}


@router.post("/v2.1/os-volumes")
@documented(request=VOLUME_CREATE, responses={200: responses.VOLUME})
async def create_volume(request: Request):
    microversion.require_at_most(request, _PROXY_MAX)
    body = await rest.json_body(request)
    validate(body, VOLUME_CREATE)
    _proxy(request, "create")
    if body["volume"].get("snapshot_id"):  # from a snapshot: none exists
        raise _snapshot_not_found(body["volume"]["snapshot_id"])
    # Never a 5xx for a well-formed request: as a project whose volume quota is 0.
    raise exceptions.OverQuota("Block storage is not available in this cloud: no volume can be created.")


@router.get("/v2.1/os-volumes/{volume_id}")
@documented(responses={200: responses.VOLUME})
async def show_volume(request: Request, volume_id: str):
    _proxy(request, "show")
    raise _volume_not_found(volume_id)


@router.delete("/v2.1/os-volumes/{volume_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_volume(request: Request, volume_id: str):
    _proxy(request, "delete")
    raise _volume_not_found(volume_id)


@router.get("/v2.1/os-snapshots")
@documented(responses={200: responses.SNAPSHOTS})
async def list_snapshots(request: Request):
    _proxy(request, "snapshots:list")
    return {"snapshots": []}


@router.get("/v2.1/os-snapshots/detail")
@documented(responses={200: responses.SNAPSHOTS})
async def list_snapshots_detail(request: Request):
    _proxy(request, "snapshots:detail")
    return {"snapshots": []}


@router.post("/v2.1/os-snapshots")
@documented(request=SNAPSHOT_CREATE, responses={200: responses.SNAPSHOT})
async def create_snapshot(request: Request):
    microversion.require_at_most(request, _PROXY_MAX)
    body = await rest.json_body(request)
    validate(body, SNAPSHOT_CREATE)
    _proxy(request, "snapshots:create")
    raise _volume_not_found(body["snapshot"]["volume_id"])


def _snapshot_not_found(snapshot_id: str):
    return exceptions.NotFound(f"Snapshot {snapshot_id} could not be found.")


@router.get("/v2.1/os-snapshots/{snapshot_id}")
@documented(responses={200: responses.SNAPSHOT})
async def show_snapshot(request: Request, snapshot_id: str):
    _proxy(request, "snapshots:show")
    raise _snapshot_not_found(snapshot_id)


@router.delete("/v2.1/os-snapshots/{snapshot_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_snapshot(request: Request, snapshot_id: str):
    _proxy(request, "snapshots:delete")
    raise _snapshot_not_found(snapshot_id)
