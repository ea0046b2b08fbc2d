"""Nothing waits forever: a build stuck past instance_build_timeout, or any other task past
task_state_timeout, ends in ERROR with a fault, stays there when the stuck operation finally
returns, and deleting it leaves nothing."""

from __future__ import annotations

import asyncio
import datetime as dt

from sqlalchemy import update

from nefos.host.compute import deadlines
from nefos.db.models import Instance, utcnow
from nefos.model import states
from tests.compute.conftest import boot_active, eventually
from tests.clouds import start_cloud, stop_cloud


async def test_a_stuck_build_is_put_in_error_with_a_fault(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_spawn_delay=4.0, instance_build_timeout=1.0)
    try:
        spawned = _spawns_returned(cloud.driver("host-1"))
        net = await cloud.make_network()
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        server = await cloud.wait_status(server_id, "ERROR", timeout=4)
        assert server["fault"]["message"].startswith("Instance build timed out after 1 seconds")
        assert server["OS-EXT-STS:vm_state"] == states.ERROR
        # The stuck spawn returns later: its save fails, it cleans up, nothing reschedules it.
        driver = cloud.driver("host-1")
        await asyncio.wait_for(spawned.wait(), 30)
        await eventually(lambda: _cleaned_up(cloud, driver, server_id), timeout=10, interval=0.2)
        server = await cloud.server(server_id)
        assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ERROR", None)
        assert server_id not in driver.guests
        assert any(n["event_type"] == "instance.create.error" for n in cloud.notifications)
        await _delete_leaves_nothing(cloud, server_id)
    finally:
        await stop_cloud(cloud)


async def test_builds_within_the_timeout_are_left_alone(tmp_path):
    # The timeout leaves a loaded machine room to finish the 0.5 s build well within it.
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_spawn_delay=0.5, instance_build_timeout=8.0)
    try:
        (server_id,) = await boot_active(cloud)
        # Created a minute ago (past the timeout), but the build had finished: not touched.
        async with cloud.rt.db.transaction() as s:
            await s.execute(update(Instance).where(Instance.uuid == server_id).values(
                created_at=utcnow() - dt.timedelta(seconds=60), updated_at=utcnow() - dt.timedelta(seconds=60)))
        assert await deadlines.reap_stuck_instances(cloud.compute_manager("host-1")) == []
        assert (await cloud.server(server_id))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


def _spawns_returned(driver) -> asyncio.Event:
    """Set once a spawn on ``driver`` has returned (or raised)."""
    returned = asyncio.Event()
    spawn = driver.spawn

    async def recording(*args, **kwargs):
        try:
            return await spawn(*args, **kwargs)
        finally:
            returned.set()
    driver.spawn = recording
    return returned


async def _cleaned_up(cloud, driver, server_id) -> bool:
    return server_id not in driver.guests and await cloud.ports(device_id=server_id) == []


async def test_a_stuck_power_operation_is_put_in_error_and_its_late_return_changes_nothing(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=1.0)
    try:
        (server_id,) = await boot_active(cloud)
        cloud.rt.cfg.fake_power_delay = 4.0  # the hypervisor now hangs on power operations
        await cloud.action(server_id, {"os-stop": None})
        server = await cloud.wait_status(server_id, "ERROR", timeout=6)
        assert server["fault"]["message"].startswith("Instance task powering-off timed out after 1 seconds")
        assert server["OS-EXT-STS:task_state"] is None
        driver = cloud.driver("host-1")
        await eventually(lambda: _guest_state(driver, server_id, states.SHUTDOWN), timeout=6)
        # The stop returned (it left the instance's lock): its compare-and-swap save found ERROR and gave up.
        manager = cloud.compute_manager("host-1")
        await eventually(lambda: _operation_over(manager, server_id), timeout=10)
        server = await cloud.server(server_id)
        assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ERROR", None)
        cloud.rt.cfg.fake_power_delay = 0.0
        assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
        await cloud.wait_gone(server_id)
    finally:
        await stop_cloud(cloud)


async def _operation_over(manager, server_id) -> bool:
    return not manager.operation_in_progress(server_id)


async def _guest_state(driver, server_id, power_state):
    return driver.guests[server_id].power_state == power_state


async def _deleting_for_two_minutes(cloud) -> str:
    """An ACTIVE server whose delete was accepted two minutes ago."""
    (server_id,) = await boot_active(cloud)
    async with cloud.rt.db.transaction() as s:
        await s.execute(update(Instance).where(Instance.uuid == server_id).values(
            task_state=states.DELETING, updated_at=utcnow() - dt.timedelta(seconds=120)))
    return server_id


async def test_a_lost_delete_is_finished_by_the_host(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=60.0)
    try:
        # A delete whose compute host never heard of it (a lost cast): deleting for 2 minutes.
        server_id = await _deleting_for_two_minutes(cloud)
        manager = cloud.compute_manager("host-1")
        assert await deadlines.reap_stuck_instances(manager) == []
        await cloud.wait_gone(server_id)
        usage = await cloud.hypervisor_usage()
        assert (usage["running_vms"], usage["allocations"]) == (0, 0), usage
    finally:
        await stop_cloud(cloud)


async def test_a_wedged_delete_is_put_in_error_and_can_be_deleted_again(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=60.0)
    try:
        server_id = await _deleting_for_two_minutes(cloud)
        manager = cloud.compute_manager("host-1")
        async with manager.instance_lock(server_id):  # the host's delete is under way, and hangs
            assert await deadlines.reap_stuck_instances(manager) == [server_id]
        server = await cloud.server(server_id)
        assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ERROR", None)
        assert server["fault"]["message"].startswith("Instance task deleting timed out after 60 seconds")
        assert await deadlines.reap_stuck_instances(manager) == []  # once
        await _delete_leaves_nothing(cloud, server_id)
    finally:
        await stop_cloud(cloud)


async def test_a_task_within_its_deadline_is_left_alone(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=60.0)
    try:
        (server_id,) = await boot_active(cloud)
        async with cloud.rt.db.transaction() as s:
            await s.execute(update(Instance).where(Instance.uuid == server_id).values(
                task_state=states.POWERING_OFF, updated_at=utcnow() - dt.timedelta(seconds=30)))
        assert await deadlines.reap_stuck_instances(cloud.compute_manager("host-1")) == []
        assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] == states.POWERING_OFF
    finally:
        await stop_cloud(cloud)


async def _delete_leaves_nothing(cloud, server_id: str) -> None:
    assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
    await cloud.wait_gone(server_id)
    assert await cloud.ports(device_id=server_id) == []
    assert (await cloud.hypervisor_usage())["allocations"] == 0


def _count_conductor_calls(manager) -> list[str]:
    """The conductor calls the calling task makes from now on (not the host's periodic tasks')."""
    calls: list[str] = []
    client = manager.conductor.client
    call, task = client.call, asyncio.current_task()

    async def counting(ctx, method, **kwargs):
        if asyncio.current_task() is task:
            calls.append(method)
        return await call(ctx, method, **kwargs)
    client.call = counting
    return calls


async def test_a_deadline_pass_over_a_host_where_nothing_is_stuck_is_one_conductor_call(tmp_path):
    # The pass runs every check_interval on every host: its cost must not be four round trips,
    # nor grow with the servers the host holds.
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=60.0, instance_build_timeout=60.0)
    try:
        await boot_active(cloud, count=3)
        manager = cloud.compute_manager("host-1")
        calls = _count_conductor_calls(manager)
        assert await deadlines.reap_stuck_instances(manager) == []
        assert calls == ["host_deadline_candidates"]
    finally:
        await stop_cloud(cloud)


async def test_a_host_pinned_to_an_older_conductor_still_reaps_its_stuck_tasks(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, task_state_timeout=60.0)
    try:
        server_id = await _deleting_for_two_minutes(cloud)
        manager = cloud.compute_manager("host-1")
        manager.conductor.client.can_send_version = _older_than("1.2")
        calls = _count_conductor_calls(manager)
        async with manager.instance_lock(server_id):  # the host's delete is under way, and hangs
            assert await deadlines.reap_stuck_instances(manager) == [server_id]
        assert "host_deadline_candidates" not in calls
    finally:
        await stop_cloud(cloud)


def _older_than(version: str):
    async def can_send_version(wanted: str) -> bool:
        return wanted < version
    return can_send_version


async def test_a_hosts_deadline_pass_sees_only_the_resizes_it_is_the_source_of(tmp_path):
    # Every host asked for every RESIZED server of the cloud: a thousand hosts, a thousand copies.
    from nefos.objects import host_instances
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        ours, theirs = await boot_active(cloud, count=2)
        two_minutes_ago = utcnow() - dt.timedelta(seconds=120)
        for uuid, source in ((ours, "host-1"), (theirs, "host-9")):
            async with cloud.rt.db.transaction() as s:
                await s.execute(update(Instance).where(Instance.uuid == uuid).values(
                    vm_state=states.RESIZED, updated_at=two_minutes_ago, system_metadata={
                        states.MIGRATION_KEY: {"status": "confirming", "source_compute": source}}))
        due = await host_instances.deadline_candidates(
            cloud.rt.db, "host-1", lost_before=utcnow() - dt.timedelta(seconds=60), builds_before=None,
            tasks_before=None)
        assert [i["uuid"] for i in due["resized"]] == [ours]
        assert (due["lost"], due["builds"], due["tasks"]) == ([], [], [])
    finally:
        await stop_cloud(cloud)
