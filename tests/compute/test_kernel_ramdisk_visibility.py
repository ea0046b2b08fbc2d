"""An image's ``kernel_id`` / ``ramdisk_id`` are looked up as the caller, like the image itself
(Nova's ``_handle_kernel_and_ramdisk``): another project's private kernel or ramdisk makes the
create (and a rebuild) fail exactly as an invisible image does, and nothing is built."""

from __future__ import annotations

import pytest

from nefos.context import RequestContext
from nefos.control.image import images
from tests.clouds import member

OWNER = "a" * 32
OTHER = "b" * 32


def _boot_headers(project: str) -> dict:
    return {**member(project), "OpenStack-API-Version": "compute 2.37"}  # networks "none"


def _ctx(project: str, admin: bool = False) -> RequestContext:
    roles = ["admin", "member", "reader"] if admin else ["member", "reader"]
    return RequestContext(project_id=project, user_id="u" * 32, roles=roles, is_admin=admin)


async def _image(cloud, project: str, disk_format: str, properties: dict | None = None, **core) -> str:
    ctx = _ctx(project, admin=core.get("visibility") == "public")  # publicizing is admin-only
    row = await images.create(cloud.rt, ctx, {"name": disk_format, "disk_format": disk_format,
                                                        "container_format": disk_format if disk_format in
                                                        ("aki", "ari", "ami") else "bare",
                                                        **core, **(properties or {})})

    async def data():
        yield b"\x00" * 4096
    await images.upload(cloud.rt, ctx, row.id, data())
    return row.id


async def _server_count(cloud, project: str) -> int:
    r = await cloud.compute.get("/v2.1/servers", headers=member(project))
    return len(r.json()["servers"])


@pytest.mark.parametrize("key", ["kernel_id", "ramdisk_id"])
async def test_another_projects_private_kernel_or_ramdisk_refuses_the_create(cloud, key):
    foreign = await _image(cloud, OTHER, "aki" if key == "kernel_id" else "ari")
    machine = await _image(cloud, OWNER, "ami", {key: foreign})
    body = await cloud.boot(imageRef=machine, networks="none", headers=_boot_headers(OWNER), expect=400)
    assert body["badRequest"]["message"] == "Can not find requested image"
    assert await _server_count(cloud, OWNER) == 0


async def test_a_visible_kernel_and_ramdisk_boot(cloud):
    """Same request, the kernel the caller's own and the ramdisk public: accepted."""
    kernel = await _image(cloud, OWNER, "aki")
    ramdisk = await _image(cloud, OTHER, "ari", visibility="public")
    machine = await _image(cloud, OWNER, "ami", {"kernel_id": kernel, "ramdisk_id": ramdisk})
    created = await cloud.boot(imageRef=machine, networks="none", headers=_boot_headers(OWNER))
    server = await cloud.wait_status(created["server"]["id"], "ACTIVE", headers=member(OWNER))
    assert server["image"]["id"] == machine


async def test_a_rebuild_to_an_image_with_a_foreign_kernel_is_refused(cloud):
    own = await _image(cloud, OWNER, "ami")
    created = await cloud.boot(imageRef=own, networks="none", headers=_boot_headers(OWNER))
    server_id = created["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=member(OWNER))
    foreign = await _image(cloud, OTHER, "aki")
    machine = await _image(cloud, OWNER, "ami", {"kernel_id": foreign})
    r = await cloud.action(server_id, {"rebuild": {"imageRef": machine}}, expect=400, headers=member(OWNER))
    assert r.json()["badRequest"]["message"] == "Cannot find image for rebuild"
    assert (await cloud.server(server_id, headers=member(OWNER)))["image"]["id"] == own


async def test_unshelve_with_a_foreign_kernel_put_on_the_snapshot_is_refused(cloud):
    """The shelved snapshot is the server owner's image: pointing its kernel_id at another
    project's private kernel does not get that kernel booted."""
    own = await _image(cloud, OWNER, "ami")
    created = await cloud.boot(name="shelf", imageRef=own, networks="none", headers=_boot_headers(OWNER))
    server_id = created["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=member(OWNER))
    await cloud.action(server_id, {"shelve": None}, headers=member(OWNER))
    await cloud.wait_status(server_id, "SHELVED_OFFLOADED", headers=member(OWNER))
    listed = await images.list_images(cloud.rt, _ctx(OWNER), [("name", "shelf-shelved")])
    (snapshot,) = listed["images"]
    foreign = await _image(cloud, OTHER, "aki")
    await images.update(cloud.rt, _ctx(OWNER), snapshot["id"], [("add", "kernel_id", foreign)])
    r = await cloud.action(server_id, {"unshelve": None}, expect=400, headers=member(OWNER))
    assert r.json()["badRequest"]["message"] == f"Unshelve attempted but the image {foreign} cannot be found."
    assert (await cloud.server(server_id, headers=member(OWNER)))["status"] == "SHELVED_OFFLOADED"

    await images.update(cloud.rt, _ctx(OWNER), snapshot["id"], [("remove", "kernel_id", None)])
    await cloud.action(server_id, {"unshelve": None}, headers=member(OWNER))
    await cloud.wait_status(server_id, "ACTIVE", headers=member(OWNER))
