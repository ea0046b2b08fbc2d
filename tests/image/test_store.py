import hashlib

import pytest

from nefos import exceptions
from nefos.control.image.store import ImageStore

IMAGE_ID = "5b2d3c5e-3c4b-4c56-9c1e-0a1b2c3d4e5f"


async def chunks(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def test_write_read_delete(tmp_path):
    store = ImageStore(tmp_path / "images")
    data = bytes(range(256)) * 10000  # 2.5 MB, several flushes
    stored = await store.write(IMAGE_ID, chunks(data, 65536))
    assert stored.size == len(data)
    assert stored.checksum == hashlib.md5(data).hexdigest()
    assert stored.os_hash_algo == "sha512"
    assert stored.os_hash_value == hashlib.sha512(data).hexdigest()
    assert stored.path == str(tmp_path / "images" / IMAGE_ID)
    got = b"".join([c async for c in store.read(IMAGE_ID, chunk_size=1000)])
    assert got == data
    assert await store.delete(IMAGE_ID) is True
    assert await store.delete(IMAGE_ID) is False
    with pytest.raises(exceptions.ImageNotFound):
        await store.open(IMAGE_ID)


async def test_size_limit_leaves_nothing_behind(tmp_path):
    store = ImageStore(tmp_path / "images")
    with pytest.raises(exceptions.ImageSizeLimitExceeded):
        await store.write(IMAGE_ID, chunks(b"x" * 5000, 1000), max_size=4096)
    assert list((tmp_path / "images").iterdir()) == []


def test_path_rejects_traversal(tmp_path):
    store = ImageStore(tmp_path / "images")
    with pytest.raises(exceptions.ImageNotFound):
        store.path("../../etc/passwd")
