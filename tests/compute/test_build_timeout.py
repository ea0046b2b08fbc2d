"""Nothing waits forever (issue 3): a build stuck past instance_build_timeout ends in ERROR with a
fault, stays there when the stuck build finally returns, and deleting it leaves nothing."""

from __future__ import annotations

import asyncio

from nefos.objects import states
from tests.compute.conftest import boot_active, eventually
from tests.pipeline.conftest import start_cloud, stop_cloud


async def test_a_stuck_build_is_put_in_error_with_a_fault(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_spawn_delay=4.0, instance_build_timeout=1.0)
    try:
        net = await cloud.make_network()
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        server = await cloud.wait_status(server_id, "ERROR", timeout=4)
        assert server["fault"]["message"].startswith("Instance build timed out after 1 seconds")
        assert server["OS-EXT-STS:vm_state"] == states.ERROR
        # The stuck spawn returns later: its save fails, it cleans up, nothing reschedules it.
        driver = cloud.driver("host-1")
        await asyncio.sleep(3.0)
        await eventually(lambda: _cleaned_up(cloud, driver, server_id), timeout=10, interval=0.2)
        server = await cloud.server(server_id)
        assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ERROR", None)
        assert server_id not in driver.guests
        assert any(n["event_type"] == "instance.create.error" for n in cloud.notifications)
        assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
        await cloud.wait_gone(server_id)
        assert await cloud.ports(device_id=server_id) == []
        assert (await cloud.hypervisor_usage())["allocations"] == 0
    finally:
        await stop_cloud(cloud)


async def test_builds_within_the_timeout_are_left_alone(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_spawn_delay=0.5, instance_build_timeout=3.0)
    try:
        (server_id,) = await boot_active(cloud)
        await asyncio.sleep(3.5)  # past the timeout, but the build had finished: not touched
        assert (await cloud.server(server_id))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


async def _cleaned_up(cloud, driver, server_id) -> bool:
    return server_id not in driver.guests and await cloud.ports(device_id=server_id) == []
