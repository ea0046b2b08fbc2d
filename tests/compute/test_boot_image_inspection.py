"""The compute host inspects every base before it builds a disk from it (Nova's deep inspection).

The files are put straight into the image store, as if the Image API had been
bypassed (data stored before inspection existed, or written by hand): the host
must not trust the store any more than the upload.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from nefos import exceptions
from nefos.control.image.store import ImageStore
from nefos.host.virt.libvirt.imagebackend import GiB, ImageCache
from tests import crafted_images
from tests.store_images import StoreImages

IMAGE_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def cache_and_store(tmp_path):
    store = ImageStore(tmp_path / "images")
    store.root.mkdir()
    return ImageCache(tmp_path / "instances", StoreImages(store.root)), store


def _store(store: ImageStore, data: bytes) -> None:
    store.path(IMAGE_ID).write_bytes(data)


def _qemu_info(path) -> dict:
    out = subprocess.run(["qemu-img", "info", "-U", "--output=json", "-f", "qcow2", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


HOSTILE = {
    "qcow2 backed by /etc/passwd": (crafted_images.qcow2_backed_by, "qcow2", "backing_file"),
    "qcow2 with an external data file": (crafted_images.qcow2_with_data_file, "qcow2", "data_file"),
    "qcow2 declared raw": (crafted_images.qcow2, "raw", "does not match disk_format"),
    "VMDK descriptor": (crafted_images.vmdk_descriptor, "vmdk", "safety check"),
    "no disk_format": (crafted_images.qcow2, None, "not in a supported format"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_base_makes_no_disk(cache_and_store, tmp_path, case):
    cache, store = cache_and_store
    build, disk_format, reason = HOSTILE[case]
    _store(store, build(tmp_path))
    disk = tmp_path / "disk"
    with pytest.raises(exceptions.ImageUnacceptable) as caught:
        await cache.create_root_disk(IMAGE_ID, disk_format, disk, 1)
    assert reason in str(caught.value) and IMAGE_ID in str(caught.value)
    assert not disk.exists()


async def test_a_virtual_size_beyond_the_flavor_root_disk_is_refused(cache_and_store, tmp_path):
    cache, store = cache_and_store
    _store(store, crafted_images.qcow2(tmp_path, "1T"))
    disk = tmp_path / "disk"
    with pytest.raises(exceptions.FlavorDiskSmallerThanImage) as caught:
        await cache.create_root_disk(IMAGE_ID, "qcow2", disk, 1)
    assert "Flavor disk is 1073741824 bytes, image is 1099511627776 bytes" in str(caught.value)
    assert not disk.exists()


async def test_an_honest_base_is_opened_as_its_declared_format(cache_and_store, tmp_path):
    cache, store = cache_and_store
    # The overlay names its base's format: QEMU never guesses it.
    _store(store, crafted_images.raw_disk(GiB // 1024))
    disk = tmp_path / "disk"
    assert await cache.create_root_disk(IMAGE_ID, "raw", disk, 1) == "qcow2"
    info = _qemu_info(disk)
    assert info["backing-filename-format"] == "raw" and info["virtual-size"] == GiB
    assert info["backing-filename"] == str(cache.base_dir / IMAGE_ID)

    _store(store, crafted_images.qcow2(tmp_path, "64M"))
    (cache.base_dir / IMAGE_ID).unlink()
    disk.unlink()
    await cache.create_root_disk(IMAGE_ID, "qcow2", disk, 0)
    info = _qemu_info(disk)
    assert info["backing-filename-format"] == "qcow2" and info["virtual-size"] == 64 * 1024 ** 2


async def test_a_kernel_is_checked_for_safety_not_for_format(cache_and_store, tmp_path):
    cache, store = cache_and_store
    _store(store, b"\x4d\x5a" + b"\x00" * 4096)  # any bytes: QEMU reads a kernel raw
    path, inspection = await cache.fetch(IMAGE_ID, "aki")
    assert path.read_bytes()[:2] == b"MZ" and inspection.format == "raw"
    (cache.base_dir / IMAGE_ID).unlink()
    _store(store, crafted_images.qcow2_backed_by(tmp_path))
    with pytest.raises(exceptions.ImageUnacceptable, match="backing_file"):
        await cache.fetch(IMAGE_ID, "aki")
