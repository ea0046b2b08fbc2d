"""Put the tiny guest into the image service and make the default image boot it.

* ``nefos-guest-kernel`` (``aki``) and ``nefos-guest-ramdisk`` (``ari``):
  public images holding the kernel and the initramfs. Their ids are derived
  from the build's digest (UUIDv5), so every process agrees on them and a
  changed build gets new images rather than changing old ones.
* The default image ``nefos-tiny`` (``nefos.control.image.bootstrap``) gets the
  properties ``kernel_id``, ``ramdisk_id`` and ``os_command_line``: a
  hypervisor that honours them (the libvirt driver) boots the guest kernel
  directly, with the image's data as the (unused) root disk; the fake driver
  ignores them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

from sqlalchemy import update as sql_update

from nefos.db.models import Image, utcnow
from nefos.control.image import images
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID, CloudImage, ensure_default_image
from nefos.guest.build import DEFAULT_CMDLINE, GuestImage, build

LOG = logging.getLogger(__name__)

KERNEL_NAME = "nefos-guest-kernel"
RAMDISK_NAME = "nefos-guest-ramdisk"


def _image_id(digest: str, kind: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://nefos.invalid/images/nefos-guest/{digest}/{kind}"))


def _digest(image: GuestImage) -> str:
    return image.kernel.name.split("-")[-1].split(".")[0]


async def _file_chunks(path: Path, size: int = 1024 * 1024):
    with open(path, "rb") as f:
        while True:
            chunk = await asyncio.to_thread(f.read, size)
            if not chunk:
                return
            yield chunk


async def _ensure_file_image(rt, image_id: str, name: str, fmt: str, path: Path, properties: dict) -> None:
    await CloudImage(rt, image_id, {"name": name, "container_format": fmt, "disk_format": fmt,
                                    "properties": properties, "tags": ["nefos-guest"]},
                     lambda: _file_chunks(path)).ensure()


async def ensure_guest_image(rt, build_dir: str | Path | None = None) -> dict:
    """Build (cached) and register the guest; point the default image at it. Returns the ids."""
    out = Path(build_dir) if build_dir else Path(rt.cfg.state_dir) / "guest-image"
    guest = await asyncio.to_thread(build, out)
    digest = _digest(guest)
    kernel_id, ramdisk_id = _image_id(digest, "kernel"), _image_id(digest, "ramdisk")
    common = {"nefos_guest_build": digest, "kernel_version": guest.kernel_version}
    await _ensure_file_image(rt, kernel_id, KERNEL_NAME, "aki", guest.kernel, dict(common))
    await _ensure_file_image(rt, ramdisk_id, RAMDISK_NAME, "ari", guest.ramdisk, dict(common))
    image_id = await ensure_default_image(rt)
    wanted = {"kernel_id": kernel_id, "ramdisk_id": ramdisk_id, "os_command_line": DEFAULT_CMDLINE}
    async with rt.db.transaction() as s:
        row = await images.load_row(s, image_id)
        props = dict(row.properties or {})
        if any(props.get(k) != v for k, v in wanted.items()):
            props.update(wanted)
            await s.execute(sql_update(Image).where(Image.id == image_id).values(properties=props,
                                                                                 updated_at=utcnow()))
            LOG.info("default image %s boots the guest kernel %s (%s)", image_id, kernel_id, guest.kernel_version)
    return {"image_id": image_id, "kernel_id": kernel_id, "ramdisk_id": ramdisk_id,
            "kernel_version": guest.kernel_version}


__all__ = ["ensure_guest_image", "DEFAULT_IMAGE_ID"]
