"""The Image API v2 over HTTP, for compute hosts (Nova's ``nova.image.glance`` client): a host has
no database, so the images it writes, deletes, lists and downloads go through the image service's
REST API like any client's. ``nefos up`` takes the same path, over loopback.

Endpoint: ``api_servers`` (Nova's ``[glance] api_servers``: the first URL), else the catalog's image
endpoint. Who asks: the request's user — the token it came with (``RequestContext.auth_token``), or
with ``auth_strategy = noauth`` its project, user and roles — for what the user asked for
(snapshot, backup, shelve: Nova passes the user's context); the service user
(``nefos.clients.identity.service_auth``) for the host's own work, where no user asked (``ctx`` None or
carrying no identity). A user token refused as expired mid-operation (a long snapshot upload) is
retried once as the service user, as Nova's service token keeps such an operation going.

Errors are the in-process client's (``nefos.control.image.client``): ``ImageNotFound``, ``ImageForbidden``,
``ImageProtected``, ``ImageConflict``, ``Invalid``..., so callers handle both alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path
from typing import Callable

import httpx

from nefos import exceptions
from nefos.context import RequestContext
from nefos.clients.identity.service_auth import ServiceAuth
from nefos.http_client import verified_tls

LOG = logging.getLogger(__name__)

PATCH_MEDIA_TYPE = "application/openstack-images-v2.1-json-patch"
CHUNK = 1 << 20
# Each read or write of a transfer may take this long (a whole upload may take much longer).
HTTP_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
MAX_LIMIT = 1000  # the Image API's largest page

# The keys of the Image API's view that are not extra properties.
VIEW_KEYS = frozenset({"id", "name", "status", "visibility", "protected", "os_hidden", "checksum",
                       "os_hash_algo", "os_hash_value", "owner", "size", "virtual_size", "min_ram",
                       "min_disk", "container_format", "disk_format", "created_at", "updated_at",
                       "tags", "self", "file", "schema"})


def with_properties(doc: dict) -> dict:
    doc["properties"] = {k: v for k, v in doc.items() if k not in VIEW_KEYS}
    return doc


def _error(r: httpx.Response, image_id: str | None) -> exceptions.NefosError:
    try:
        message = str(r.json().get("message") or r.text)
    except ValueError:
        message = r.text
    message = message[:500]
    if r.status_code == 404:
        return exceptions.ImageNotFound(image_id=image_id or "(unknown)")
    if r.status_code == 403:
        if "protected" in message.lower():
            return exceptions.ImageProtected(image_id=image_id)
        return exceptions.ImageForbidden(reason=message)
    if r.status_code == 409:
        return exceptions.ImageConflict(reason=message)
    if r.status_code == 413:
        return exceptions.RequestEntityTooLarge(message)
    if r.status_code == 401:
        return exceptions.Unauthorized(message)
    if r.status_code in (400, 415):
        return exceptions.Invalid(message)
    return exceptions.ServiceUnavailable(f"the Image API answered {r.status_code}: {message}")


class ImageHTTPClient:
    def __init__(self, cfg, transport: httpx.AsyncBaseTransport | None = None):
        self.cfg = cfg
        self.service = ServiceAuth(cfg, roles="service,admin")
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=HTTP_TIMEOUT, transport=self._transport,
                                           verify=verified_tls())
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def base_url(self) -> str:
        servers = [s.strip() for s in (self.cfg.api_servers or "").split(",") if s.strip()]
        if servers:
            return servers[0].rstrip("/")
        from nefos.clients.identity import catalog
        return (self.service.endpoint("image") or catalog.service_url(self.cfg, "image")).rstrip("/")

    async def _headers(self, ctx: RequestContext | None, as_service: bool) -> dict[str, str]:
        headers = {}
        if ctx is not None:
            headers["X-OpenStack-Request-ID"] = ctx.global_request_id or ctx.request_id
        if not as_service and ctx is not None and ctx.auth_token:
            headers["X-Auth-Token"] = ctx.auth_token
        elif not as_service and ctx is not None and ctx.project_id and self.cfg.auth_strategy == "noauth":
            roles = list(ctx.roles) + (["admin"] if ctx.is_admin and "admin" not in ctx.roles else [])
            headers.update({"X-Project-Id": ctx.project_id, "X-User-Id": ctx.user_id or "",
                            "X-Roles": ",".join(roles)})
        else:
            headers.update(await self.service.headers(self.http))
        return headers

    async def _request(self, ctx: RequestContext | None, method: str, path: str, *, image_id: str | None = None,
                       ok=(200,), content_factory: Callable | None = None, **kwargs) -> httpx.Response:
        """One request; a refused user token (expired) is tried once more as the service user, a
        refused service token once more with a new one."""
        as_service = ctx is None or not (ctx.auth_token or (ctx.project_id and self.cfg.auth_strategy == "noauth"))
        for attempt in range(2):
            headers = {**kwargs.pop("headers", {}), **await self._headers(ctx, as_service)}
            if content_factory is not None:
                kwargs["content"] = content_factory()
            try:
                r = await self.http.request(method, self.base_url() + path, headers=headers, **kwargs)
            except httpx.HTTPError as exc:
                raise exceptions.ServiceUnavailable(f"the Image API is unreachable: {exc}") from exc
            if r.status_code == 401 and attempt == 0 and self.cfg.auth_strategy == "keystone":
                if as_service:
                    self.service.forget()
                as_service = True
                continue
            break
        if r.status_code not in ok:
            raise _error(r, image_id)
        return r

    # Reading ---------------------------------------------------------------------------------
    async def get(self, ctx: RequestContext | None, image_id: str) -> dict:
        """The image as the Image API shows it, plus ``properties`` (the extra properties)."""
        r = await self._request(ctx, "GET", f"/v2/images/{image_id}", image_id=image_id)
        return with_properties(r.json())

    async def list(self, ctx: RequestContext | None, filters: list[tuple[str, str]], *,
                   limit: int | None = None, marker: str | None = None) -> list[dict]:
        """The images ``ctx`` sees that match the Image API list ``filters``, as ``get`` shows
        them: at most ``limit`` (all when None: the pages are followed, as glanceclient does)."""
        found: list[dict] = []
        while limit is None or len(found) < limit:
            page_size = MAX_LIMIT if limit is None else min(limit - len(found), MAX_LIMIT)
            params = [*filters, ("limit", str(page_size))] + ([("marker", marker)] if marker else [])
            doc = (await self._request(ctx, "GET", "/v2/images", params=params)).json()
            found.extend(with_properties(image) for image in doc["images"])
            if "next" not in doc or not doc["images"]:
                break
            marker = doc["images"][-1]["id"]
        return found

    async def list_backups(self, ctx: RequestContext | None, instance_uuid: str, backup_type: str) -> list[dict]:
        """The instance's backup images of ``backup_type``, oldest first (for the rotation)."""
        return await self.list(ctx, [("instance_uuid", instance_uuid), ("backup_type", backup_type),
                                     ("image_type", "backup"), ("sort_key", "created_at"), ("sort_dir", "asc")])

    async def list_unfinished_snapshots(self, ctx: RequestContext | None, instance_uuid: str) -> list[dict]:
        """The instance's snapshot and backup images whose data never arrived (queued or saving)."""
        return [i for i in await self.list(ctx, [("instance_uuid", instance_uuid)])
                if i.get("status") in ("queued", "saving") and i.get("image_type") in ("snapshot", "backup")]

    async def download_verified(self, ctx: RequestContext | None, image_id: str, target: Path) -> dict:
        """Stream the active image's data into the file ``target`` and check it against the
        image's ``os_hash_value`` (else its md5 ``checksum``) and size, as Nova's download does;
        the image. ``ImageNotFound``, or ``ImageUnacceptable`` (no data, or not what it says)."""
        image = await self.get(ctx, image_id)
        if image.get("status") != "active":
            raise exceptions.ImageUnacceptable(image_id=image_id,
                                               reason=f"image is {image.get('status')}, it has no data")
        algo, expected = image.get("os_hash_algo"), image.get("os_hash_value")
        if not (algo and expected) and image.get("checksum"):
            algo, expected = "md5", image["checksum"]
        try:
            digest = await self.download(ctx, image_id, target, algo)
        except ValueError:  # an algorithm this host does not know
            raise exceptions.ImageUnacceptable(image_id=image_id, reason=f"unknown hash algorithm {algo}")
        if expected and digest != expected:
            raise exceptions.ImageUnacceptable(
                image_id=image_id, reason=f"its data does not match its {algo} hash (corrupt in transfer or store)")
        size = target.stat().st_size
        if image.get("size") is not None and size != image["size"]:
            raise exceptions.ImageUnacceptable(
                image_id=image_id, reason=f"{size} bytes arrived, the image has {image['size']}")
        return image

    async def download(self, ctx: RequestContext | None, image_id: str, target: Path,
                       hash_algo: str | None = None) -> str | None:
        """Stream the image's data into the file ``target``; the hex digest of ``hash_algo`` of
        what was written (None without an algorithm)."""
        digest = hashlib.new(hash_algo) if hash_algo else None
        as_service = ctx is None or not ctx.auth_token
        headers = await self._headers(ctx, as_service)
        try:
            async with self.http.stream("GET", f"{self.base_url()}/v2/images/{image_id}/file",
                                        headers=headers) as r:
                if r.status_code == 204:
                    raise exceptions.ImageUnacceptable(image_id=image_id, reason="it has no data")
                if r.status_code != 200:
                    await r.aread()
                    raise _error(r, image_id)
                with open(target, "wb") as f:
                    def write(chunk: bytes) -> None:
                        f.write(chunk)
                        if digest is not None:
                            digest.update(chunk)
                    async for chunk in r.aiter_bytes(CHUNK):
                        await asyncio.to_thread(write, chunk)
                    await asyncio.to_thread(os.fsync, f.fileno())
        except httpx.HTTPError as exc:
            raise exceptions.ServiceUnavailable(f"the download of image {image_id} failed: {exc}") from exc
        return digest.hexdigest() if digest is not None else None

    # Writing ---------------------------------------------------------------------------------
    async def create(self, ctx: RequestContext | None, body: dict) -> dict:
        r = await self._request(ctx, "POST", "/v2/images", json=body, ok=(201,))
        return with_properties(r.json())

    async def update(self, ctx: RequestContext | None, image_id: str, changes: list[dict]) -> dict:
        """Apply a JSON patch (``[{"op": "replace", "path": "/disk_format", "value": ...}]``)."""
        r = await self._request(ctx, "PATCH", f"/v2/images/{image_id}", image_id=image_id, json=changes,
                                headers={"Content-Type": PATCH_MEDIA_TYPE})
        return with_properties(r.json())

    async def upload_file(self, ctx: RequestContext | None, image_id: str, path, disk_format: str,
                          on_chunk: Callable[[int], None] | None = None) -> dict:
        """Store the file at ``path`` as the data of the queued image ``image_id`` (streamed);
        ``on_chunk`` hears the size of each chunk sent."""
        await self.update(ctx, image_id, [{"op": "replace", "path": "/disk_format", "value": disk_format},
                                          {"op": "replace", "path": "/container_format", "value": "bare"}])

        def chunks():
            async def read():
                with open(path, "rb") as f:
                    while chunk := await asyncio.to_thread(f.read, CHUNK):
                        yield chunk
                        if on_chunk is not None:
                            on_chunk(len(chunk))
            return read()
        size = os.stat(path).st_size
        await self._request(ctx, "PUT", f"/v2/images/{image_id}/file", image_id=image_id, ok=(204,),
                            content_factory=chunks,
                            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        return await self.get(ctx, image_id)

    async def delete(self, ctx: RequestContext | None, image_id: str, *, missing_ok: bool = True) -> None:
        """Delete an image; one already gone is not an error unless ``missing_ok`` is false."""
        try:
            await self._request(ctx, "DELETE", f"/v2/images/{image_id}", image_id=image_id, ok=(204,))
        except exceptions.ImageNotFound:
            if not missing_ok:
                raise
