"""The default image every fresh cloud has, so a server can boot right away.

Its id is derived from its name (a UUIDv5), so every process and every
restart agrees on it without storing anything beside the database; creating
it twice is a primary-key conflict, which we treat as "already there".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from typing import AsyncIterator, Callable

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.context import admin_context
from nefos.db.models import Image, utcnow
from nefos.db.retry import at_start
from nefos.control.image import images

LOG = logging.getLogger(__name__)

DEFAULT_IMAGE_NAME = "nefos-tiny"
DEFAULT_IMAGE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "https://nefos.invalid/images/nefos-tiny"))
DEFAULT_IMAGE_SIZE = 16 * 1024
STALE_SAVING = dt.timedelta(minutes=5)


def default_image_bytes() -> bytes:
    """A small deterministic placeholder (a later change replaces it with a bootable disk)."""
    header = b"NEFOS-TINY placeholder disk image (raw)\n"
    out = bytearray(header)
    block = hashlib.sha256(header).digest()
    while len(out) < DEFAULT_IMAGE_SIZE:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:DEFAULT_IMAGE_SIZE])


async def _chunks(data: bytes, size: int = 4096):
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def ensure_default_image(rt) -> str:
    """Register (once) the public ``nefos-tiny`` raw image and make sure its data is stored; returns its id."""
    return await _default_image(rt).ensure()


async def ensure_default_image_at_start(rt) -> str:
    """``ensure_default_image`` run again until the database lets it (a service's start-up work)."""
    return await at_start(_default_image(rt).ensure)


def _default_image(rt) -> "CloudImage":
    return CloudImage(rt, DEFAULT_IMAGE_ID, {"name": DEFAULT_IMAGE_NAME, "container_format": "bare",
                                             "disk_format": "raw", "properties": {}, "tags": []},
                      lambda: _chunks(default_image_bytes()))


class CloudImage:
    """A public image the cloud registers itself (the default image, the guest's kernel and ramdisk):
    registered once under a fixed id, registered again if an operator deleted it, its data uploaded
    when it has none and written again into a store that lost it. ``ensure`` may be attempted
    several times by one process.

    An image another process may be uploading stays ``saving`` until ``STALE_SAVING`` has passed.
    One this process's own upload left ``saving`` (the database went away before the upload could
    mark it active, or put it back) is uploaded again on the next attempt at once: otherwise a
    service started during a database restart would serve an image nobody can boot from."""

    def __init__(self, rt, image_id: str, columns: dict, data: Callable[[], AsyncIterator[bytes]]):
        self.rt, self.image_id, self.columns, self.data = rt, image_id, columns, data
        self.left_saving = False

    async def ensure(self) -> str:
        rt, image_id = self.rt, self.image_id
        async with rt.db.reader() as s:
            row = await images.load_row(s, image_id)
        if row is None:
            now = utcnow()
            try:
                async with rt.db.transaction() as s:
                    s.add(Image(id=image_id, status="queued", visibility="public", owner=None, min_disk=0,
                                min_ram=0, protected=False, os_hidden=False, created_at=now, updated_at=now,
                                **self.columns))
            except IntegrityError:
                pass  # another process registered it first
        elif row.status == "deleted":
            LOG.info("image %s was deleted; registering it again", image_id)
            async with rt.db.transaction() as s:
                await s.execute(update(Image).where(Image.id == image_id, Image.status == "deleted").values(
                    status="queued", size=None, virtual_size=None, checksum=None, os_hash_algo=None,
                    os_hash_value=None, location=None, updated_at=utcnow()))
        elif row.status == "saving" and (self.left_saving or
                                         utcnow() - (row.updated_at or row.created_at) > STALE_SAVING):
            LOG.warning("image %s was left saving%s; uploading it again", image_id,
                        " by this service's upload" if self.left_saving else "")
            await images.transition(rt, image_id, "saving", "queued")

        async with rt.db.reader() as s:
            row = await images.load_row(s, image_id)
        store = images.store_for(rt)
        if row.status == "queued":
            try:
                await images.upload(rt, admin_context(), image_id, self.data(), on_saving=self._now_saving)
            except exceptions.ImageConflict:
                pass  # another process is uploading it
        elif row.status == "active" and not store.exists(image_id):
            LOG.info("image %s has no data in this store; writing it", image_id)
            await store.write(image_id, self.data())
        self.left_saving = False
        return image_id

    def _now_saving(self, saving: bool) -> None:
        self.left_saving = saving
