"""A snapshot that keeps making progress outlives task_state_timeout (the deadline of a task state
that does not change); one that stalls is stopped at the deadline, its image deleted."""

from __future__ import annotations

import asyncio

import pytest

from nefos.control.image import images
from nefos.context import admin_context
from tests.compute.conftest import FAST, boot_active, compute_component
from tests.clouds import ADMIN, start_cloud, stop_cloud

TIMEOUT = 3.0  # task_state_timeout here (a loaded machine may hold a conductor call 1 s); the upload below
#                takes three times as long


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=TIMEOUT, **FAST)
    yield harness
    await stop_cloud(harness)


def _slow_upload(manager, *, progressing: bool):
    original = manager.image_api.upload_file

    async def upload(ctx, image_id, path, disk_format, on_chunk=None):
        for _ in range(12):  # a slow link: 3 s in all
            await asyncio.sleep(TIMEOUT / 4)
            if progressing and on_chunk is not None:
                on_chunk(1 << 20)
        return await original(ctx, image_id, path, disk_format, on_chunk=on_chunk)
    manager.image_api.upload_file = upload


async def _snapshot(cloud, server_id: str, name: str) -> str:
    r = await cloud.compute.post(f"/v2.1/servers/{server_id}/action", json={"createImage": {"name": name}},
                                 headers={**ADMIN, "OpenStack-API-Version": "compute 2.45"})
    assert r.status_code == 202, r.text
    return r.json()["image_id"]


async def test_a_snapshot_making_progress_outlives_the_deadline(cloud):
    (server_id,) = await boot_active(cloud)
    _slow_upload(compute_component(cloud, "host-1").manager, progressing=True)
    image_id = await _snapshot(cloud, server_id, "slow-but-moving")
    server = await cloud.wait_status(server_id, {"ACTIVE", "ERROR"}, timeout=20)
    assert server["status"] == "ACTIVE", server.get("fault")
    image = await images.get(cloud.rt, admin_context(), image_id)
    assert image.status == "active"


async def test_a_stalled_snapshot_is_stopped_at_the_deadline(cloud):
    (server_id,) = await boot_active(cloud)
    _slow_upload(compute_component(cloud, "host-1").manager, progressing=False)
    image_id = await _snapshot(cloud, server_id, "stalled")
    server = await cloud.wait_status(server_id, {"ACTIVE", "ERROR"}, timeout=20)
    assert server["status"] == "ERROR" and "image_uploading" in server["fault"]["message"], server
    r = await cloud.compute.get(f"/v2.1/images/{image_id}", headers=ADMIN)
    deadline = asyncio.get_running_loop().time() + 10
    while r.status_code != 404:  # the abandoned snapshot's image goes once the upload gives up
        assert asyncio.get_running_loop().time() < deadline, r.text
        await asyncio.sleep(0.1)
        r = await cloud.compute.get(f"/v2.1/images/{image_id}", headers=ADMIN)
