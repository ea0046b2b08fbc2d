"""The server actions that save a server's disk as an image: ``createImage``, ``createBackup``,
``shelve``, and the rest of shelving: ``shelveOffload`` and ``unshelve`` (Compute API reference;
unshelve takes an ``availability_zone`` from 2.77, a ``host`` and a null zone, unpinning, from 2.91).

createImage and createBackup answer 202 before the image has data: with ``{"image_id": ...}`` from
microversion 2.45, with a ``Location`` header of the image before it (createBackup: only when
``rotation`` > 0, as Nova).
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions
from nefos.control.compute.rest import image_metadata
from nefos.control.compute.rest.common import base_url
from nefos.control.compute.rest.validation import NAME, validate, validate_integer
from nefos.control.compute.authorization import authorize

_METADATA = {"type": "object", "patternProperties": {"^[a-zA-Z0-9-_:. /]{1,255}$": {
    "type": "string", "maxLength": 255}}, "additionalProperties": False}
_CREATE_IMAGE_SCHEMA = {"type": "object", "properties": {"createImage": {
    "type": "object", "properties": {"name": NAME, "metadata": _METADATA},
    "required": ["name"], "additionalProperties": False}}, "required": ["createImage"]}
_CREATE_BACKUP_SCHEMA = {"type": "object", "properties": {"createBackup": {
    "type": "object", "properties": {"name": NAME, "backup_type": {"type": "string"},
                                     "rotation": {"type": ["integer", "string"], "pattern": "^[0-9]+$"},
                                     "metadata": _METADATA},
    "required": ["name", "backup_type", "rotation"], "additionalProperties": False}},
    "required": ["createBackup"]}
# Until 2.77 (availability_zone) and 2.91 (host) the shelve actions take no arguments; shelve and
# shelveOffload never do.
_NO_ARGUMENTS = ({"type": "null"}, {"type": "object", "additionalProperties": False})

POLICIES = {
    "createImage": "os_compute_api:servers:create_image",
    "createBackup": "os_compute_api:os-create-backup",
    "shelve": "os_compute_api:os-shelve:shelve",
    "shelveOffload": "os_compute_api:os-shelve:shelve_offload",
    "unshelve": "os_compute_api:os-shelve:unshelve",
}


def _image_created(request: Request, image_id: str, *, with_location: bool = True) -> Response:
    if request.state.api_version.matches("2.45"):
        return JSONResponse({"image_id": image_id}, status_code=202)
    response = Response(status_code=202)
    if with_location:
        response.headers["Location"] = f"{base_url(request)}/v2.1/images/{image_id}"
    return response


async def _check_metadata_quota(request: Request, ctx, server_id: str, metadata: dict | None) -> None:
    """Below 2.39 Nova holds the snapshot's metadata to the ``metadata_items`` quota (403), once
    it has found the server (404 first)."""
    if metadata and not request.state.api_version.matches("2.39"):
        await request.app.state.compute_api.get(ctx, server_id)
        await image_metadata.check_quota(request, ctx, metadata)


async def create_image(request: Request, ctx, server_id: str, body: dict) -> Response:
    validate(body, _CREATE_IMAGE_SCHEMA)
    args = body["createImage"]
    await _check_metadata_quota(request, ctx, server_id, args.get("metadata"))
    image = await request.app.state.compute_api.snapshot(ctx, server_id, args["name"], args.get("metadata"))
    return _image_created(request, image["id"])


async def create_backup(request: Request, ctx, server_id: str, body: dict) -> Response:
    validate(body, _CREATE_BACKUP_SCHEMA)
    args = body["createBackup"]
    rotation = validate_integer(args["rotation"], "rotation", min_value=0)
    await _check_metadata_quota(request, ctx, server_id, args.get("metadata"))
    image = await request.app.state.compute_api.snapshot(
        ctx, server_id, args["name"], args.get("metadata"), backup_type=args["backup_type"], rotation=rotation)
    return _image_created(request, image["id"], with_location=rotation > 0)


def _no_arguments(name: str, body: dict) -> None:
    if not any(_matches(body[name], schema) for schema in _NO_ARGUMENTS):
        raise exceptions.ValidationError(f"Invalid input for field/attribute {name}. "
                                         f"Value: {body[name]}. None is expected.")


def _matches(value, schema: dict) -> bool:
    try:
        validate(value, schema)
    except exceptions.ValidationError:
        return False
    return True


async def shelve(request: Request, ctx, server_id: str, body: dict) -> Response:
    _no_arguments("shelve", body)
    await request.app.state.compute_api.shelve(ctx, server_id)
    return Response(status_code=202)


async def shelve_offload(request: Request, ctx, server_id: str, body: dict) -> Response:
    _no_arguments("shelveOffload", body)
    await request.app.state.compute_api.shelve_offload(ctx, server_id)
    return Response(status_code=202)


# Nova's parameter_types.name: no leading or trailing whitespace.
_AZ_NAME = {"type": "string", "minLength": 1, "maxLength": 255,
            "pattern": r"^(?![\s\u00a0])[\s\S]*(?<![\s\u00a0])$"}
# 2.77: null, or an availability zone (required: {} is refused).
_UNSHELVE_V277 = {"type": "object", "properties": {"unshelve": {
    "type": ["object", "null"], "properties": {"availability_zone": _AZ_NAME},
    "required": ["availability_zone"], "additionalProperties": False}},
    "required": ["unshelve"], "additionalProperties": False}
# 2.91: also a host, and a null zone (unpin); {} is allowed again.
_UNSHELVE_V291 = {"type": "object", "properties": {"unshelve": {
    "type": ["object", "null"], "properties": {"availability_zone": {"type": ["string", "null"]},
                                               "host": {"type": "string"}},
    "additionalProperties": False}}, "required": ["unshelve"], "additionalProperties": False}


async def unshelve(request: Request, ctx, server_id: str, body: dict) -> Response:
    version = request.state.api_version
    kwargs: dict = {}
    if version.matches("2.91"):
        validate(body, _UNSHELVE_V291)
    elif version.matches("2.77"):
        validate(body, _UNSHELVE_V277)
    else:
        _no_arguments("unshelve", body)
    args = body["unshelve"] or {}
    if version.matches("2.77") and "availability_zone" in args:
        kwargs["new_az"] = args["availability_zone"]
    if version.matches("2.91") and args.get("host"):
        kwargs["host"] = args["host"]
    await request.app.state.compute_api.unshelve(ctx, server_id, **kwargs)
    return Response(status_code=202)


HANDLERS = {"createImage": create_image, "createBackup": create_backup, "shelve": shelve,
            "shelveOffload": shelve_offload, "unshelve": unshelve}


async def handle(request: Request, ctx, server_id: str, name: str, body: dict) -> Response:
    authorize(ctx, POLICIES[name])
    return await HANDLERS[name](request, ctx, server_id, body)
