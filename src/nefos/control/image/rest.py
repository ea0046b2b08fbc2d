"""The Image API v2 (the subset Nefos serves), Glance-compatible on the wire.

Errors use Glance's body: ``{"message": ..., "code": "404 Not Found", "title": "Not Found"}``.
"""

from __future__ import annotations

import http
import json

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse

from nefos import exceptions, openapi, rest
from nefos.control.image import images, schemas

PATCH_MEDIA_TYPE = "application/openstack-images-v2.1-json-patch"
# Glance's patch media types and the JSON Schema draft each body follows (v2.0: the older format).
PATCH_MEDIA_TYPES = {"application/openstack-images-v2.0-json-patch": 4, PATCH_MEDIA_TYPE: 10}
UPLOAD_MEDIA_TYPES = ("application/octet-stream", "application/x-image")

# (id, status) newest first; Nefos serves the v2 subset these share.
VERSIONS = [("v2.9", "CURRENT")] + [(f"v2.{n}", "SUPPORTED") for n in range(8, -1, -1)]


def glance_error_body(status: int, message: str, kind: str) -> dict:
    try:
        title = http.HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return {"message": message, "code": f"{status} {title}", "title": title}


GLANCE_ERROR_SCHEMA = {"type": "object", "required": ["message", "code", "title"], "properties": {
    "message": {"type": "string"}, "code": {"type": "string"}, "title": {"type": "string"}}}


def _media_type(request: Request) -> str | None:
    value = request.headers.get("content-type")
    if value is None:
        return None
    return value.split(";", 1)[0].strip().lower()


async def _json(request: Request):
    raw = await request.body()  # bounded by max_request_body_size (nefos.rest)
    if not raw:
        raise exceptions.Invalid("The request body is missing or empty.")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise exceptions.Invalid("Malformed request body: the body is not valid JSON.")


def _versions_doc(request: Request) -> dict:
    base = str(request.base_url).rstrip("/")
    return {"versions": [{"id": vid, "status": status,
                          "links": [{"rel": "self", "href": f"{base}/v2/"}]}
                         for vid, status in VERSIONS]}


def _declared_size(request: Request) -> int | None:
    for header in ("x-openstack-image-size", "content-length"):
        value = request.headers.get(header)
        if value is not None:
            try:
                size = int(value)
            except ValueError:
                raise exceptions.Invalid(f"Invalid {header} header: {value!r}")
            if size < 0:
                raise exceptions.Invalid(f"Invalid {header} header: {value!r}")
            return size
    return None


def _image_data_upload(method: str, path: str) -> bool:
    """PUT /v2/images/{id}/file streams image data to the store under image_size_cap."""
    return method == "PUT" and path.startswith("/v2/images/") and path.endswith("/file")


def create_app(rt, *, size_cap: int | None = None):
    """The Image API over ``rt``; ``size_cap`` bounds uploads (default: Glance's 1 TiB)."""
    app = rest.make_app("Nefos Image API", "image", glance_error_body, streamed_bodies=_image_data_upload)
    app.state.rt = rt
    cap = images.size_cap(rt) if size_cap is None else size_cap

    @app.get("/")
    @openapi.documented(responses={300: schemas.VERSIONS_DOCUMENT})
    async def root_versions(request: Request):
        return JSONResponse(_versions_doc(request), status_code=300)

    @app.get("/versions")
    @openapi.documented(responses={200: schemas.VERSIONS_DOCUMENT})
    async def versions(request: Request):
        return JSONResponse(_versions_doc(request))

    @app.get("/v2/schemas/image")
    @openapi.documented(responses={200: schemas.SCHEMA_DOCUMENT})
    async def image_schema():
        return JSONResponse(schemas.image_schema())

    @app.get("/v2/schemas/images")
    @openapi.documented(responses={200: schemas.SCHEMA_DOCUMENT})
    async def images_schema():
        return JSONResponse(schemas.images_schema())

    @app.get("/v2/images")
    @openapi.documented(responses={200: schemas.images_schema}, query=images.LIST_QUERY)
    async def list_images(request: Request):
        ctx = images.authorize(rest.get_context(request), "get_images")
        doc = await images.list_images(rt, ctx, list(request.query_params.multi_items()))
        return JSONResponse(doc)

    @app.post("/v2/images")
    @openapi.documented(request=schemas.image_schema, responses={201: schemas.image_schema})
    async def create_image(request: Request):
        ctx = images.authorize(rest.get_context(request), "add_image")
        body = await _json(request)
        row = await images.create(rt, ctx, body)
        doc = images.view(row)
        return JSONResponse(doc, status_code=201, headers={"Location": doc["self"]})

    @app.get("/v2/images/{image_id}")
    @openapi.documented(responses={200: schemas.image_schema})
    async def show_image(request: Request, image_id: str):
        ctx = images.authorize(rest.get_context(request), "get_image")
        row = await images.get(rt, ctx, image_id)
        return JSONResponse(images.view(row))

    @app.get("/v2/images/{image_id}/tasks")
    @openapi.documented(responses={200: schemas.image_tasks_schema})
    async def image_tasks(request: Request, image_id: str):
        # Glance 2.12's tasks of an image (imports, location tasks). Nefos stores data synchronously
        # and runs no image tasks, so a visible image has none.
        ctx = images.authorize(rest.get_context(request), "get_image")
        await images.get(rt, ctx, image_id)
        return JSONResponse({"tasks": []})

    @app.patch("/v2/images/{image_id}")
    @openapi.documented(responses={200: schemas.image_schema})
    async def update_image(request: Request, image_id: str):
        ctx = images.authorize(rest.get_context(request), "modify_image")
        media_type = _media_type(request)
        if media_type not in PATCH_MEDIA_TYPES:
            raise exceptions.UnsupportedMediaType(
                f"Unsupported Content-Type {media_type}; use {PATCH_MEDIA_TYPE}.",
                content_type=media_type)
        changes = images.parse_patch(await _json(request), PATCH_MEDIA_TYPES[media_type])
        row = await images.update(rt, ctx, image_id, changes)
        return JSONResponse(images.view(row))

    @app.delete("/v2/images/{image_id}")
    async def delete_image(request: Request, image_id: str):
        ctx = images.authorize(rest.get_context(request), "delete_image")
        await images.delete(rt, ctx, image_id)
        return Response(status_code=204)

    @app.put("/v2/images/{image_id}/file")
    async def upload_image(request: Request, image_id: str):
        ctx = images.authorize(rest.get_context(request), "upload_image")
        media_type = _media_type(request)
        if media_type not in UPLOAD_MEDIA_TYPES:
            raise exceptions.UnsupportedMediaType(
                f"Unsupported Content-Type {media_type}; use application/octet-stream.",
                content_type=media_type)
        declared = _declared_size(request)
        try:
            await images.upload(rt, ctx, image_id, request.stream(),
                                declared_size=declared, max_size=cap)
        except ClientDisconnect:
            raise exceptions.Invalid("The client disconnected before the upload finished.")
        return Response(status_code=204)

    @app.get("/v2/images/{image_id}/file")
    async def download_image(request: Request, image_id: str):
        ctx = images.authorize(rest.get_context(request), "download_image")
        row, chunks = await images.open_data(rt, ctx, image_id)
        if chunks is None:
            return Response(status_code=204)
        headers = {"Content-Length": str(row.size)}
        if row.checksum:
            headers["Content-MD5"] = row.checksum
        return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)

    @app.put("/v2/images/{image_id}/tags/{tag}")
    async def add_tag(request: Request, image_id: str, tag: str):
        ctx = images.authorize(rest.get_context(request), "modify_image")
        await images.add_tag(rt, ctx, image_id, tag)
        return Response(status_code=204)

    @app.delete("/v2/images/{image_id}/tags/{tag}")
    async def remove_tag(request: Request, image_id: str, tag: str):
        ctx = images.authorize(rest.get_context(request), "modify_image")
        await images.remove_tag(rt, ctx, image_id, tag)
        return Response(status_code=204)

    openapi.serve(app, "/v2/openapi.json", title="Nefos Image API", version="2.9",
                  error_schema=GLANCE_ERROR_SCHEMA)
    return app
