"""The image file store: one file per image under ``<state_dir>/images/``.

Uploads are written in chunks to a temporary file beside the final one while
the size, the MD5 ``checksum`` and the ``os_hash_value`` (SHA-512) are
computed; the file is renamed into place only once it is complete, so a
reader never sees half an image. Blocking file I/O runs in worker threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterable, AsyncIterator

from nefos import exceptions, fileperms

HASH_ALGO = "sha512"
CHUNK_SIZE = 64 * 1024
_FLUSH_SIZE = 1024 * 1024  # gather this much before handing a write to a thread

_SAFE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,63}$")


@dataclass
class StoredData:
    path: str
    size: int
    checksum: str  # md5 hex
    os_hash_algo: str
    os_hash_value: str


class ImageStore:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @classmethod
    def for_runtime(cls, rt) -> "ImageStore":
        return cls(Path(rt.cfg.state_dir) / "images")

    def path(self, image_id: str) -> Path:
        if not _SAFE_ID.match(image_id or ""):
            raise exceptions.ImageNotFound(image_id=image_id)
        return self.root / image_id

    def exists(self, image_id: str) -> bool:
        return self.path(image_id).is_file()

    async def write(self, image_id: str, chunks: AsyncIterable[bytes], *,
                    max_size: int | None = None) -> StoredData:
        """Stream ``chunks`` into the image's file; raises ImageSizeLimitExceeded past ``max_size``."""
        final = self.path(image_id)
        fileperms.private_dir(self.root)  # tenants' image data: this service's alone
        tmp = fileperms.private_file(self.root / f".{image_id}.{uuid.uuid4().hex}.part")
        md5 = hashlib.md5(usedforsecurity=False)
        sha = hashlib.new(HASH_ALGO)
        size = 0
        pending: list[bytes] = []
        pending_len = 0

        def _flush(fh, data: bytes) -> None:
            md5.update(data)
            sha.update(data)
            fh.write(data)

        fh = await asyncio.to_thread(open, tmp, "wb")
        try:
            try:
                async for chunk in chunks:
                    if not chunk:
                        continue
                    size += len(chunk)
                    if max_size is not None and size > max_size:
                        raise exceptions.ImageSizeLimitExceeded(limit=max_size)
                    pending.append(chunk)
                    pending_len += len(chunk)
                    if pending_len >= _FLUSH_SIZE:
                        data, pending, pending_len = b"".join(pending), [], 0
                        await asyncio.to_thread(_flush, fh, data)
                if pending:
                    await asyncio.to_thread(_flush, fh, b"".join(pending))
                await asyncio.to_thread(fh.flush)
                await asyncio.to_thread(os.fsync, fh.fileno())
            finally:
                await asyncio.to_thread(fh.close)
            await asyncio.to_thread(os.replace, tmp, final)
        except BaseException:
            await asyncio.to_thread(_unlink, tmp)
            raise
        return StoredData(path=str(final), size=size, checksum=md5.hexdigest(),
                          os_hash_algo=HASH_ALGO, os_hash_value=sha.hexdigest())

    async def open(self, image_id: str, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        """Open the image's file now and return an iterator streaming it in chunks.

        Opening first means a missing file is reported before a response
        starts, and a download keeps going if the image is deleted meanwhile.
        """
        try:
            fh = await asyncio.to_thread(open, self.path(image_id), "rb")
        except FileNotFoundError:
            raise exceptions.ImageNotFound(image_id=image_id)
        return _read_chunks(fh, chunk_size)

    async def read(self, image_id: str, chunk_size: int = CHUNK_SIZE) -> AsyncIterator[bytes]:
        """Stream the image's file in chunks."""
        async for chunk in await self.open(image_id, chunk_size):
            yield chunk

    async def delete(self, image_id: str) -> bool:
        """Remove the image's file; True when there was one."""
        return await asyncio.to_thread(_unlink, self.path(image_id))


async def _read_chunks(fh, chunk_size: int) -> AsyncIterator[bytes]:
    try:
        while True:
            chunk = await asyncio.to_thread(fh.read, chunk_size)
            if not chunk:
                break
            yield chunk
    finally:
        await asyncio.to_thread(fh.close)


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
