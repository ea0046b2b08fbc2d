"""``/v2.1/images``: Nova's image proxy over the Image service (list, detail, show, delete).

Served below microversion 2.36 only (404 from 2.36, Nova's ``MAX_PROXY_API_SUPPORT_VERSION``).
The images are read as the caller through the image client, so the Image service's visibility
rules and policy decide what a project sees (never another project's private image). Nova's
filters map onto the Image API's: ``server`` and ``type`` onto the ``instance_uuid`` and
``image_type`` properties, ``changes-since`` onto ``updated_at`` (gte), ``minRam``/``minDisk``
onto ``min_ram``/``min_disk``, ``property-<name>`` onto the property ``<name>``.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common, microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import POSITIVE_INTEGER, bool_from_string, query_schema, validate_query
from nefos.clients.identity import catalog
from nefos.control.image.client import ImageAPI
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

MAX_VERSION = microversion.MAX_PROXY_VERSION

# Nova's SUPPORTED_FILTERS: its query parameter -> the Image API's list filter.
_FILTERS = {"name": "name", "status": "status", "changes-since": "updated_at", "server": "instance_uuid",
            "type": "image_type", "minRam": "min_ram", "minDisk": "min_disk"}
_LIST_PARAMS = {**{name: {"type": "string"} for name in _FILTERS},
                "limit": POSITIVE_INTEGER, "page_size": POSITIVE_INTEGER, "offset": POSITIVE_INTEGER,
                "marker": {"type": "string"}}
# Nova never refuses other parameters here (property-<name> filters among them).
LIST_QUERY = query_schema(_LIST_PARAMS, strict=False)

# Nova's ViewBuilder._get_status and _get_progress over the Image API's statuses.
_STATUS = {"active": "ACTIVE", "queued": "SAVING", "saving": "SAVING", "deleted": "DELETED",
           "pending_delete": "DELETED", "killed": "ERROR"}
_PROGRESS = {"queued": 25, "saving": 50, "active": 100}
# Properties the Image API stores as JSON text that Nova hands out decoded.
_JSON_PROPERTIES = ("block_device_mapping", "mappings")


def image_api(request: Request) -> ImageAPI:
    compute_api = request.app.state.compute_api
    return compute_api.image_api if compute_api is not None else ImageAPI(request.app.state.rt)


def context(request: Request, rule: str):
    """The caller's context, once the Image service's policy ``rule`` passes for it (the proxy
    acts with the caller's token, so the Image service's policy applies, as behind Nova)."""
    ctx = rest.get_context(request)
    authorize(ctx, rule)
    return ctx


async def get_image(request: Request, ctx, image_id: str) -> dict:
    """The image as ``ctx`` sees it; 404 "Image not found." as Nova's proxy says."""
    try:
        return await image_api(request).get(ctx, image_id)
    except exceptions.ImageNotFound:
        raise exceptions.NotFound("Image not found.") from None


# Views (Nova's views/images.py) -------------------------------------------------------------------

def _links(request: Request, image_id: str) -> list[dict]:
    image_service = catalog.base_url(request.app.state.rt.cfg, "image_api_port")
    return [*common.links(request, "images", image_id),
            {"rel": "alternate", "type": "application/vnd.openstack.image",
             "href": f"{image_service}/images/{image_id}"}]


def _metadata(image: dict) -> dict:
    metadata = dict(image.get("properties") or {})
    for key in _JSON_PROPERTIES:
        if isinstance(metadata.get(key), str):
            try:
                metadata[key] = json.loads(metadata[key])
            except ValueError:
                pass
    return metadata


def basic_view(request: Request, image: dict) -> dict:
    return {"id": image["id"], "name": image.get("name"), "links": _links(request, image["id"])}


def detail_view(request: Request, image: dict) -> dict:
    metadata = _metadata(image)
    view = {
        "id": image["id"],
        "name": image.get("name"),
        "minRam": int(image.get("min_ram") or 0),
        "minDisk": int(image.get("min_disk") or 0),
        "metadata": metadata,
        "created": image.get("created_at"),
        "updated": image.get("updated_at"),
        "status": _STATUS.get(image.get("status"), "UNKNOWN"),
        "progress": _PROGRESS.get(image.get("status"), 0),
        "OS-EXT-IMG-SIZE:size": image.get("size") or 0,
        "links": _links(request, image["id"]),
    }
    instance_uuid = metadata.get("instance_uuid")
    if instance_uuid is not None:
        view["server"] = {"id": instance_uuid, "links": common.links(request, "servers", instance_uuid)}
    if metadata.get("auto_disk_config") is not None:
        view["OS-DCF:diskConfig"] = "AUTO" if bool_from_string(metadata["auto_disk_config"]) else "MANUAL"
    return view


# Routes --------------------------------------------------------------------------------------------

def _filters(request: Request) -> list[tuple[str, str]]:
    """Nova's ``_get_filters`` in the Image API's terms (the last value of a repeated parameter)."""
    params = request.query_params
    filters = []
    for name in params.keys():
        value = params[name]
        if name in _FILTERS:
            if name == "server":
                value = value.rsplit("/", 1)[-1]  # a server's link names it too
            elif name == "status":
                value = value.lower()  # the Image API's statuses are lower case
            elif name == "changes-since":
                value = f"gte:{value}"
            filters.append((_FILTERS[name], value))
        elif name.startswith("property-"):
            filters.append((name.removeprefix("property-"), value))
    return filters


async def _list(request: Request, view, collection: str) -> dict:
    microversion.require_at_most(request, MAX_VERSION)
    ctx = context(request, "get_images")
    validate_query(request.query_params, LIST_QUERY)
    params = request.query_params
    limit = int(params["limit"]) if "limit" in params else None
    found = await image_api(request).list(ctx, _filters(request), limit=limit, marker=params.get("marker"))
    doc: dict = {"images": [view(request, image) for image in found]}
    next_links = common.collection_links(request, found, collection, "id")
    if next_links:
        doc["images_links"] = next_links
    return doc


@router.get("/v2.1/images")
@documented(query=LIST_QUERY, responses={200: responses.IMAGES})
async def list_images(request: Request):
    return await _list(request, basic_view, "images")


@router.get("/v2.1/images/detail")
@documented(query=LIST_QUERY, responses={200: responses.IMAGES_DETAIL})
async def list_images_detail(request: Request):
    return await _list(request, detail_view, "images/detail")


@router.get("/v2.1/images/{image_id}")
@documented(responses={200: responses.IMAGE})
async def show_image(request: Request, image_id: str):
    microversion.require_at_most(request, MAX_VERSION)
    ctx = context(request, "get_image")
    return {"image": detail_view(request, await get_image(request, ctx, image_id))}


@router.delete("/v2.1/images/", include_in_schema=False)
@documented(responses={})  # never a success
async def delete_blank_image(request: Request):
    """A blank image id matches no route of Nova's (404), not the list's (which would be a 405)."""
    raise exceptions.NotFound("The resource could not be found.")


@router.delete("/v2.1/images/{image_id}")
@documented(responses={204: responses.NO_BODY})
async def delete_image(request: Request, image_id: str):
    microversion.require_at_most(request, MAX_VERSION)
    ctx = context(request, "delete_image")
    try:
        await image_api(request).delete(ctx, image_id, missing_ok=False)
    except exceptions.ImageNotFound:
        raise exceptions.NotFound("Image not found.") from None
    except exceptions.NotAuthorized:
        # The Image service refuses a protected image or another project's: Nova's 403.
        raise exceptions.NotAuthorized("You are not allowed to delete the image.") from None
    return Response(status_code=204)
