"""In-process access to images for the control plane (the Compute API, the conductor), which
shares the image service's database, so it reads image rows directly rather than calling the
Image API over HTTP. Compute hosts have no database: they use ``nefos.clients.image``.
"""

from __future__ import annotations

import contextlib
from typing import Callable

from nefos import exceptions
from nefos.context import RequestContext
from nefos.control.image import images
from nefos.clients.image import VIEW_KEYS as _VIEW_KEYS  # the keys that are not extra properties


# Properties a snapshot never inherits from its base image: they describe the snapshot itself.
_SNAPSHOT_OWN = frozenset({"instance_uuid", "user_id", "image_type", "backup_type", "base_image_ref",
                           "image_location", "owner_id"})




class ImageAPI:
    def __init__(self, rt):
        self.rt = rt

    async def get(self, ctx: RequestContext, image_id: str) -> dict:
        """The image as the Image API shows it, plus ``properties`` (the extra properties).

        Raises ``ImageNotFound`` when the image is missing, deleted or not visible to ``ctx``.
        """
        row = await images.get(self.rt, ctx, image_id)
        doc = images.view(row)
        doc["properties"] = dict(row.properties or {})
        return doc

    async def check_kernel_and_ramdisk(self, ctx: RequestContext, image: dict) -> None:
        """``ImageNotFound`` unless ``ctx`` may see ``image``'s ``kernel_id`` and ``ramdisk_id``
        (Nova's ``_handle_kernel_and_ramdisk``: they are fetched as the caller, like the image)."""
        props = image.get("properties") or {}
        for key in ("kernel_id", "ramdisk_id"):
            if props.get(key):
                await self.get(ctx, props[key])

    async def path(self, image_id: str) -> str:
        """The local file holding the image's data.

        Raises ``ImageNotFound`` when the image is missing or deleted and
        ``ImageUnacceptable`` when it has no data (not ``active``).
        """
        async with self.rt.db.reader() as s:
            row = await images.load_row(s, image_id)
        if row is None or row.status == "deleted":
            raise exceptions.ImageNotFound(image_id=image_id)
        if row.status != "active" or not row.location:
            raise exceptions.ImageUnacceptable(image_id=image_id,
                                               reason=f"image is {row.status}, it has no data")
        path = images.store_for(self.rt).path(image_id)
        if not path.is_file():
            raise exceptions.ImageUnacceptable(image_id=image_id,
                                               reason=f"its data is missing from the store ({path})")
        return str(path)

    # Snapshots (createImage, createBackup, shelve) -----------------------------------------
    async def create_snapshot(self, ctx: RequestContext, instance: dict, name: str, image_type: str,
                              extra_properties: dict | None = None) -> dict:
        """A queued image for a snapshot of ``instance`` (Nova's compute_utils.create_image): owned
        by the caller's project, private, inheriting the base image's min_ram/min_disk; the
        compute host uploads the data."""
        base = None
        if instance.get("image_ref"):
            with contextlib.suppress(exceptions.ImageNotFound):
                base = await self.get(ctx.elevated(), instance["image_ref"])
        # The base image's properties carry over (kernel_id/ramdisk_id, os_*, hw_*: what boots it),
        # as Nova's snapshots inherit the instance's image properties, except the snapshot's own.
        properties = {k: v for k, v in (base or {}).get("properties", {}).items() if k not in _SNAPSHOT_OWN}
        properties.update({"instance_uuid": instance["uuid"], "user_id": ctx.user_id, "image_type": image_type,
                           "base_image_ref": instance.get("image_ref") or ""})
        properties.update(extra_properties or {})
        body: dict = {"name": name, "visibility": "private", **properties}
        if base is not None:
            body["min_ram"], body["min_disk"] = base["min_ram"], base["min_disk"]
        doc = images.view(await images.create(self.rt, ctx, body))
        doc["properties"] = properties
        return doc

    async def delete(self, ctx: RequestContext, image_id: str, *, missing_ok: bool = True) -> None:
        """Delete an image; one already gone is not an error unless ``missing_ok`` is false.

        Raises ``NotAuthorized`` (``ImageForbidden``, ``ImageProtected``) when ``ctx`` may not."""
        try:
            await images.delete(self.rt, ctx, image_id)
        except exceptions.ImageNotFound:
            if not missing_ok:
                raise

    async def list(self, ctx: RequestContext, filters: list[tuple[str, str]], *, limit: int | None = None,
                   marker: str | None = None) -> list[dict]:
        """The images ``ctx`` sees that match the Image API list ``filters``, newest first, as
        ``get`` shows them: at most ``limit`` (all when None; pages of the Image API's maximum
        are followed, as glanceclient does), after the image ``marker``.

        Raises ``Invalid`` for a bad filter value or an unknown marker."""
        found: list[dict] = []
        while limit is None or len(found) < limit:
            page_size = images.MAX_LIMIT if limit is None else min(limit - len(found), images.MAX_LIMIT)
            params = [*filters, ("limit", str(page_size))] + ([("marker", marker)] if marker else [])
            doc = await images.list_images(self.rt, ctx, params)
            for image in doc["images"]:
                image["properties"] = {k: image[k] for k in image if k not in _VIEW_KEYS}
            found.extend(doc["images"])
            if "next" not in doc or not doc["images"]:
                break
            marker = doc["images"][-1]["id"]
        return found

    async def set_properties(self, ctx: RequestContext, image_id: str,
                             change: Callable[[dict], dict]) -> dict:
        """Replace the image's extra properties with ``change(current)`` (atomically); the new ones.

        Raises ``ImageNotFound``, ``NotAuthorized`` when ``ctx`` may not modify the image, and
        ``Invalid`` for a property the Image API refuses."""
        return await images.set_properties(self.rt, ctx, image_id, change)
