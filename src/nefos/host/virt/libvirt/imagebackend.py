"""Guest disks on local files (Nova's ``imagebackend.Qcow2`` and its image cache).

* ``<instances_path>/_base/<image id>``: a cached copy of the image's data
  (downloaded once per host from the Image API, ``nefos.clients.image``, to a
  temporary name, checked against the image's ``os_hash_value`` and renamed; then
  shared read-only);
  the directory 0750 and its files 0640, and the guests' disks 0660, for
  QEMU's group (``nefos.fileperms``): no other local user reads them;
* ``<instances_path>/<uuid>/disk``: a copy-on-write qcow2 overlay over the
  base (``qemu-img create -f qcow2 -b <base> -F raw|qcow2``), grown to the
  flavor's root disk size;
* ``disk.eph<N>`` and ``disk.swap``: blank qcow2 disks for the flavor's (or
  the request's) ephemeral and swap space;
* kernel and ramdisk images (direct kernel boot) are used from the cache as
  they are.

Every base is inspected each time a disk or a kernel is made from it
(``nefos.model.format_inspection``, Nova's deep inspection and base-image
re-check): its content must be its declared ``disk_format`` and pass the safety
checks, ``qemu-img info`` (always with an explicit ``-f``) must show no backing
file or data file, and its virtual size must fit the flavor's root disk
(``FlavorDiskSmallerThanImage``, as Nova's ``verify_base_size``). QEMU is never
left to probe a format: the overlay names its base's format with ``-F``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from pathlib import Path

from nefos import exceptions, fileperms
from nefos.model import format_inspection

LOG = logging.getLogger(__name__)

GiB = 1024 ** 3
MiB = 1024 ** 2

_cache_locks: dict[tuple[int, str], asyncio.Lock] = {}  # (event loop, base file) -> lock


async def run(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise exceptions.InstanceDeployFailure(
            reason=f"{' '.join(argv)} failed ({proc.returncode}): {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


class ImageCache:
    def __init__(self, instances_path: Path, images):
        """``images``: where the data comes from, ``await images.download_verified(None, image_id,
        path)`` (``nefos.clients.image.ImageHTTPClient``: as the host's service user, since a
        base is shared by every instance on the host whoever asked first)."""
        self.instances_path = instances_path
        self.base_dir = instances_path / "_base"
        self.images = images

    async def fetch(self, image_id: str, disk_format: str | None) -> tuple[Path, format_inspection.Inspection]:
        """The cached base file of ``image_id`` (declared ``disk_format``) once it passes inspection."""
        base = await self._cached(image_id)
        inspection = await asyncio.to_thread(format_inspection.inspect, str(base), disk_format, image_id)
        if inspection.format != "raw":
            await self._check_qemu_info(base, inspection.format, image_id)
        return base, inspection

    async def _cached(self, image_id: str) -> Path:
        """The cached copy of ``image_id``'s data (downloaded on first use)."""
        target = self.base_dir / image_id
        if target.is_file():
            return target
        lock = _cache_locks.setdefault((id(asyncio.get_running_loop()), str(target)), asyncio.Lock())
        async with lock:
            if target.is_file():
                return target
            fileperms.shared_dir(self.base_dir, fileperms.qemu_gid())
            tmp = target.with_name(f".{image_id}.part")
            try:
                await self.images.download_verified(None, image_id, tmp)
                fileperms.share_file(tmp, fileperms.qemu_gid())  # QEMU reads it; no one else
                os.replace(tmp, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            LOG.info("image %s cached as %s", image_id, target)
        return target

    @staticmethod
    async def _check_qemu_info(path: Path, fmt: str, image_id: str) -> None:
        """What QEMU itself reads in the base's header: no backing file, no data file (Nova's
        second look after the inspector, with the format given, never probed)."""
        info = json.loads(await run("qemu-img", "info", "-U", "--output=json", "-f", fmt, str(path)))
        backing = info.get("backing-filename") or info.get("full-backing-filename")
        data_file = ((info.get("format-specific") or {}).get("data") or {}).get("data-file")
        if backing:
            raise exceptions.ImageUnacceptable(image_id=image_id, reason=f"fmt={fmt} backed by: {backing}")
        if data_file:
            raise exceptions.ImageUnacceptable(image_id=image_id, reason=f"fmt={fmt} has data-file: {data_file}")

    async def create_root_disk(self, image_id: str, disk_format: str | None, path: Path, size_gb: int) -> str:
        """A qcow2 overlay over the inspected base, ``size_gb`` large (the image's own size when 0);
        returns the disk's format (qcow2)."""
        base, inspection = await self.fetch(image_id, disk_format)
        if size_gb and inspection.virtual_size > size_gb * GiB:
            raise exceptions.FlavorDiskSmallerThanImage(flavor_size=size_gb * GiB,
                                                        image_size=inspection.virtual_size)
        argv = ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(base), "-F", inspection.format, str(path)]
        if size_gb:
            argv.append(str(size_gb * GiB))
        await run(*argv)
        fileperms.share_file(path, fileperms.qemu_gid(), writable=True)
        return "qcow2"

    @staticmethod
    async def create_blank(path: Path, size_bytes: int) -> str:
        await run("qemu-img", "create", "-q", "-f", "qcow2", str(path), str(size_bytes))
        fileperms.share_file(path, fileperms.qemu_gid(), writable=True)
        return "qcow2"
