"""``/v2.1/images/{image_id}/metadata``: Nova's proxy of an image's properties.

Served below microversion 2.39 (404 from 2.39, Nova's ``MAX_IMAGE_META_PROXY_API_VERSION``). The
metadata is the image's extra properties; a change replaces them all at once through the image
client as the caller (Nova's update with ``purge_props``), after Nova's checks: its metadata
schema and its ``metadata_items`` quota on the whole result (403 "Image metadata limit
exceeded"). The Image service refusing the change (another project's image, a reserved name)
answers 403, as Nova maps the Image service's refusals.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.images import context, get_image, image_api
from nefos.control.compute.rest.server_metadata import _META_ITEM_BODY, _METADATA_BODY
from nefos.control.compute.rest.validation import validate
from nefos.objects import quotas
from nefos.openapi import documented

router = APIRouter()

# Nova's MAX_IMAGE_META_PROXY_API_VERSION.
MAX_VERSION = "2.38"


async def _limit(request: Request, ctx) -> int:
    """The caller's project's ``metadata_items`` limit (Nova's ``QUOTAS.limit_check`` context)."""
    rt = request.app.state.rt
    async with rt.db.reader() as s:
        return (await quotas.limits(s, rt.cfg, ctx.project_id))["metadata_items"]


def _within(limit: int, metadata: dict) -> dict:
    """``metadata``, or Nova's 403 when it has more items than ``limit`` (-1: unlimited)."""
    if metadata and 0 <= limit < len(metadata):
        raise exceptions.OverQuota("Image metadata limit exceeded", overs=["metadata_items"])
    return metadata


async def check_quota(request: Request, ctx, metadata: dict) -> None:
    """Nova's ``check_img_metadata_properties_quota`` (403 over the ``metadata_items`` limit)."""
    if metadata:
        _within(await _limit(request, ctx), metadata)


async def _change(request: Request, ctx, image_id: str, change) -> dict:
    """Replace the image's properties with ``change(current)``, within Nova's quota (checked on
    the result in the same transaction); the new properties."""
    await get_image(request, ctx, image_id)  # 404 before the quota, as Nova
    limit = await _limit(request, ctx)
    try:
        return await image_api(request).set_properties(ctx, image_id,
                                                       lambda current: _within(limit, change(current)))
    except exceptions.ImageNotFound:
        raise exceptions.NotFound("Image not found.") from None
    except exceptions.NotAuthorized:
        # The Image service refused (not the caller's image, a read-only or reserved name): Nova's
        # ImageNotAuthorized.
        raise exceptions.NotAuthorized(f"Not authorized for image {image_id}.") from None


async def _begin(request: Request, rule: str, schema: dict | None = None):
    microversion.require_at_most(request, MAX_VERSION)
    ctx = context(request, rule)
    body = None
    if schema is not None:
        body = await rest.json_body(request)
        validate(body, schema)
    return ctx, body


@router.get("/v2.1/images/{image_id}/metadata")
@documented(responses={200: responses.METADATA})
async def list_metadata(request: Request, image_id: str):
    ctx, _ = await _begin(request, "get_image")
    image = await get_image(request, ctx, image_id)
    return {"metadata": image.get("properties") or {}}


@router.post("/v2.1/images/{image_id}/metadata")
@documented(request=_METADATA_BODY, responses={200: responses.METADATA})
async def update_metadata(request: Request, image_id: str):
    ctx, body = await _begin(request, "modify_image", _METADATA_BODY)
    metadata = await _change(request, ctx, image_id, lambda current: {**current, **body["metadata"]})
    return {"metadata": metadata}


@router.put("/v2.1/images/{image_id}/metadata")
@documented(request=_METADATA_BODY, responses={200: responses.METADATA})
async def replace_metadata(request: Request, image_id: str):
    ctx, body = await _begin(request, "modify_image", _METADATA_BODY)
    await _change(request, ctx, image_id, lambda current: dict(body["metadata"]))
    return {"metadata": body["metadata"]}


@router.get("/v2.1/images/{image_id}/metadata/{key}")
@documented(responses={200: responses.METADATA_ITEM})
async def show_metadata_item(request: Request, image_id: str, key: str):
    ctx, _ = await _begin(request, "get_image")
    metadata = (await get_image(request, ctx, image_id)).get("properties") or {}
    if key not in metadata:
        raise exceptions.NotFound("The resource could not be found.")
    return {"meta": {key: metadata[key]}}


@router.put("/v2.1/images/{image_id}/metadata/{key}")
@documented(request=_META_ITEM_BODY, responses={200: responses.METADATA_ITEM})
async def set_metadata_item(request: Request, image_id: str, key: str):
    ctx, body = await _begin(request, "modify_image", _META_ITEM_BODY)
    if key not in body["meta"]:
        raise exceptions.ValidationError("Request body and URI mismatch")
    await _change(request, ctx, image_id, lambda current: {**current, key: body["meta"][key]})
    return {"meta": body["meta"]}


@router.delete("/v2.1/images/{image_id}/metadata/{key}")
@documented(responses={204: responses.NO_BODY})
async def delete_metadata_item(request: Request, image_id: str, key: str):
    ctx, _ = await _begin(request, "modify_image")
    image = await get_image(request, ctx, image_id)
    if key not in (image.get("properties") or {}):
        raise exceptions.NotFound("Invalid metadata key")

    def without(current: dict) -> dict:
        if key not in current:  # removed meanwhile
            raise exceptions.NotFound("Invalid metadata key")
        return {k: v for k, v in current.items() if k != key}
    await _change(request, ctx, image_id, without)
    return Response(status_code=204)
