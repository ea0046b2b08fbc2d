"""Images that would show a guest host files never boot; an honest image's guest sees only its bytes.

Real libvirt + QEMU. The hostile images are put straight into the image store
(as if the Image API had been bypassed: data stored before upload inspection,
or by hand), so it is the compute host's own inspection that stops them; the
1 TiB claim goes through the Image API, which accepts it as Glance does. Each
is refused at boot: the server goes to ERROR with a fault naming the reason,
and no domain is ever defined for it.
"""

from __future__ import annotations

import hashlib
import re

from nefos.context import RequestContext
from nefos.control.image import images
from tests import crafted_images
from tests.libvirt.conftest import HOST, avirsh, wait_console

ADMIN_PROJECT = "f" * 32
ADMIN = {"X-Project-Id": ADMIN_PROJECT, "X-User-Id": "e" * 32, "X-Roles": "admin,member,reader",
         "OpenStack-API-Version": "compute 2.37"}
MiB = 1024 ** 2


def _admin() -> RequestContext:
    return RequestContext(project_id=ADMIN_PROJECT, user_id="e" * 32)


async def _image(cloud, disk_format: str, data: bytes, *, bypass_upload: bool = False) -> str:
    """An active image of ``data``, booting the tiny guest's kernel and ramdisk."""
    guest = cloud.guest_image
    row = await images.create(cloud.rt, _admin(), {
        "name": f"attack-{disk_format}", "disk_format": disk_format, "container_format": "bare",
        "kernel_id": guest["kernel_id"], "ramdisk_id": guest["ramdisk_id"],
        "os_command_line": "console=ttyS0 panic=-1"})

    async def chunks():
        yield data
    if not bypass_upload:
        await images.upload(cloud.rt, _admin(), row.id, chunks())
        return row.id
    stored = await images.store_for(cloud.rt).write(row.id, chunks())
    assert await images.transition(cloud.rt, row.id, "queued", "active", size=stored.size,
                                     checksum=stored.checksum, location=stored.path)
    return row.id


async def _boot(cloud, image_id: str, name: str, flavor: str = "1") -> str:
    r = await cloud.compute.post("/v2.1/servers", headers=ADMIN, json={"server": {
        "name": name, "imageRef": image_id, "flavorRef": flavor, "networks": "none"}})
    assert r.status_code == 202, r.text
    return r.json()["server"]["id"]


async def test_hostile_images_never_boot_and_an_honest_one_shows_only_its_bytes(lvcloud, tmp_path):
    cloud = lvcloud
    driver = cloud.driver(HOST)
    hostile = {
        # A qcow2 declared raw is refused for the mismatch: never probed by its magic, its backing
        # file never followed.
        "qcow2 backed by /etc/passwd, declared raw": (
            "raw", crafted_images.qcow2_backed_by(tmp_path), True, "does not match disk_format"),
        "qcow2 backed by /etc/passwd": (
            "qcow2", crafted_images.qcow2_backed_by(tmp_path), True, "backing_file"),
        "qcow2 with an external data file": (
            "qcow2", crafted_images.qcow2_with_data_file(tmp_path), True, "data_file"),
        "VMDK descriptor naming /etc/passwd": (
            "vmdk", crafted_images.vmdk_descriptor(tmp_path), True, "safety check"),
        "1 TiB sparse claim on a 1 GiB root disk": (
            "qcow2", crafted_images.qcow2(tmp_path, "1T"), False, "Flavor's disk is too small"),
    }
    servers = {}
    for case, (disk_format, data, bypass, _reason) in hostile.items():
        image_id = await _image(cloud, disk_format, data, bypass_upload=bypass)
        servers[case] = await _boot(cloud, image_id, re.sub(r"\W+", "-", case)[:40])
    for case, sid in servers.items():
        server = await cloud.wait_status(sid, "ERROR", timeout=60, headers=ADMIN)
        reason = hostile[case][3]
        assert reason in server["fault"]["message"], (case, server["fault"])
        assert sid not in await avirsh("list", "--all", "--uuid"), case
        assert not (driver.instances_path / sid).exists(), case

    # An honest raw disk: the guest reads exactly the uploaded bytes, then zeros up to the flavor's 1 GiB.
    data = crafted_images.raw_disk(4 * MiB)
    sid = await _boot(cloud, await _image(cloud, "raw", data), "honest")
    await cloud.wait_status(sid, "ACTIVE", timeout=120, headers=ADMIN)
    out = await wait_console(cloud, sid, "NEFOS-DISK:", timeout=120)
    line = re.search(r"NEFOS-DISK: vda (\d+) sectors ([0-9a-f]{64}) ([0-9a-f]{64})", out)
    assert line, out[-2000:]
    assert int(line.group(1)) * 512 == 1024 ** 3
    assert line.group(2) == hashlib.sha256(data).hexdigest()
    assert line.group(3) == hashlib.sha256(bytes(4 * MiB)).hexdigest()

    # QEMU runs as libvirt's user, not root.
    name = (await avirsh("domname", sid)).strip()
    pid = int(open(f"/run/libvirt/qemu/{name}.pid").read().strip())
    uid = int(re.search(r"^Uid:\s+(\d+)", open(f"/proc/{pid}/status").read(), re.M).group(1))
    assert uid == driver.qemu_user.uid != 0
