"""What Nefos keeps on the host is for Nefos (and, where it must, QEMU's group) alone: the state
directory others may pass through but not list (0711), everything in it 0600 / 0700 — the SQLite
database, Fernet keys, passwords.yaml, clouds.yaml, the image store — and the libvirt image cache
and guests' disks readable only by QEMU's group."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from nefos import fileperms
from nefos.control.image.store import ImageStore
from nefos.host.virt.libvirt.imagebackend import ImageCache
from tests.isolation.helpers import login, start_nefos, stop_nefos
from tests.store_images import StoreImages


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_nefos_up_leaves_nothing_other_users_can_read(tmp_path):
    state = tmp_path / "state"  # new: nefos up creates it
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)  # as an operator's mkdir would leave it: tightened on start
    proc, clouds = start_nefos(state)
    try:
        admin = clouds["nefos-admin"]["auth"]
        api = login(admin["auth_url"].rstrip("/"), admin["username"], admin["password"], admin["project_name"])
        r = api.request("POST", "image", "/v2/images",
                        json={"name": "i", "disk_format": "raw", "container_format": "bare"})
        assert r.status_code == 201, r.text
        r = api.request("PUT", "image", f"/v2/images/{r.json()['id']}/file", content=b"x" * 4096,
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 204, r.text
    finally:
        stop_nefos(proc, state)
    assert _mode(state) == 0o711
    seen = set()
    for root, dirs, files in os.walk(state):
        for name in dirs + files:
            path = Path(root) / name
            if path.name == "nefos-up.log":  # the test's own output
                continue
            seen.add(path.relative_to(state).parts[0])
            wanted = 0o700 if path.is_dir() else 0o600
            assert _mode(path) & ~wanted == 0, f"{path} is {oct(_mode(path))}"
    assert {"nefos.sqlite", "fernet.key", "passwords.yaml", "clouds.yaml", "images"} <= seen


async def test_the_image_cache_and_disks_are_for_qemu_s_group_alone():
    parent = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        parent.chmod(0o755)  # as /var/lib: reachable down to the directories Nefos makes
        await _check_cache_and_disks(parent)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


async def _check_cache_and_disks(tmp_path: Path) -> None:
    gid = fileperms.qemu_gid()
    store = ImageStore(tmp_path / "images")

    async def chunks():
        yield b"\0" * 65536

    await store.write("img-1", chunks())
    assert _mode(tmp_path / "images") == 0o700 and _mode(store.path("img-1")) == 0o600
    instances = fileperms.passable_dir(tmp_path / "instances")
    cache = ImageCache(instances, StoreImages(tmp_path / "images"))
    base, _ = await cache.fetch("img-1", "raw")
    assert (_mode(base.parent), base.parent.stat().st_gid) == (0o750, gid)
    assert (_mode(base), base.stat().st_uid, base.stat().st_gid) == (0o640, 0, gid)
    inst_dir = fileperms.shared_dir(instances / "uuid-1", gid)
    assert (_mode(instances), _mode(inst_dir), inst_dir.stat().st_gid) == (0o711, 0o750, gid)
    await cache.create_root_disk("img-1", "raw", inst_dir / "disk", 1)
    await cache.create_blank(inst_dir / "disk.eph0", 1 << 20)
    for disk in (inst_dir / "disk", inst_dir / "disk.eph0"):
        assert (_mode(disk), disk.stat().st_gid) == (0o660, gid), disk
    # QEMU's user can reach and read them (libvirt-qemu, group kvm on Debian)
    user = next(n for n in fileperms.QEMU_USERS if fileperms.account(n))
    done = subprocess.run(["runuser", "-u", user, "--", "head", "-c", "1", str(base)], capture_output=True)
    assert done.returncode == 0, done.stderr
    nobody = subprocess.run(["runuser", "-u", "nobody", "--", "head", "-c", "1", str(base)], capture_output=True)
    assert nobody.returncode != 0
