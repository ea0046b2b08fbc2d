"""The periodic power-state sync, rule by rule (the cases a-f of Nova's ``_sync_power_states``)."""

from __future__ import annotations

import pytest

from nefos.model import states
from tests.compute.conftest import action_names, boot_active, compute_component, db_instance, set_instance
from tests.clouds import start_cloud, stop_cloud


@pytest.fixture
async def quiet(tmp_path):
    """Events off, no periodic task: only the passes a test runs change anything."""
    harness = await start_cloud(tmp_path, fake_hosts=1, handle_virt_lifecycle_events=False,
                                lifecycle_stopped_delay=0, sync_power_state_interval=-1)
    yield harness
    await stop_cloud(harness)


async def sync_pass(cloud):
    await compute_component(cloud, "host-1").manager.periodic_sync_power_states()


async def test_a_instances_with_a_task_state_are_skipped(quiet):
    (server_id,) = await boot_active(quiet)
    quiet.driver("host-1").guests[server_id].power_state = states.SHUTDOWN
    await set_instance(quiet, server_id, task_state=states.POWERING_ON)
    await sync_pass(quiet)
    instance = await db_instance(quiet, server_id)
    assert (instance["vm_state"], instance["task_state"], instance["power_state"]) == \
        (states.ACTIVE, states.POWERING_ON, states.RUNNING)
    assert "stop" not in await action_names(quiet, server_id)
    # Once the operation is over, the next pass acts.
    await set_instance(quiet, server_id, task_state=None)
    await sync_pass(quiet)
    await quiet.wait_status(server_id, "SHUTOFF", timeout=2)


async def test_b_a_missing_guest_is_nostate(quiet):
    (server_id,) = await boot_active(quiet)
    del quiet.driver("host-1").guests[server_id]
    await sync_pass(quiet)
    instance = await db_instance(quiet, server_id)
    # ... and ACTIVE with NOSTATE is only logged (rule e).
    assert (instance["vm_state"], instance["task_state"], instance["power_state"]) == \
        (states.ACTIVE, None, states.NOSTATE)


async def test_c_the_driver_power_state_wins(quiet):
    (server_id,) = await boot_active(quiet)
    await set_instance(quiet, server_id, power_state=states.CRASHED)  # a stale database
    await sync_pass(quiet)
    assert (await db_instance(quiet, server_id))["power_state"] == states.RUNNING


@pytest.mark.parametrize("vm_state", [states.BUILDING, states.RESCUED, states.RESIZED, states.SUSPENDED,
                                      states.PAUSED, states.ERROR])
async def test_d_vm_states_that_are_ignored(quiet, vm_state):
    (server_id,) = await boot_active(quiet)
    guest = quiet.driver("host-1").guests[server_id]
    guest.power_state = states.SHUTDOWN
    await set_instance(quiet, server_id, vm_state=vm_state)
    await sync_pass(quiet)
    instance = await db_instance(quiet, server_id)
    assert (instance["vm_state"], instance["task_state"]) == (vm_state, None)
    assert instance["power_state"] == states.SHUTDOWN  # c) still applies
    assert guest.power_state == states.SHUTDOWN
    assert "stop" not in await action_names(quiet, server_id)


@pytest.mark.parametrize("power_state", [states.SHUTDOWN, states.CRASHED, states.SUSPENDED_POWER])
async def test_e_active_but_down_is_stopped(quiet, power_state):
    (server_id,) = await boot_active(quiet)
    guest = quiet.driver("host-1").guests[server_id]
    guest.power_state = power_state
    await sync_pass(quiet)
    server = await quiet.wait_status(server_id, "SHUTOFF", timeout=2)
    assert server["OS-EXT-STS:vm_state"] == states.STOPPED
    assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
    assert guest.power_state == states.SHUTDOWN
    assert "stop" in await action_names(quiet, server_id)


@pytest.mark.parametrize("power_state", [states.PAUSED_POWER, states.NOSTATE])
async def test_e_active_but_paused_or_missing_is_left(quiet, power_state):
    (server_id,) = await boot_active(quiet)
    driver = quiet.driver("host-1")
    if power_state == states.NOSTATE:
        del driver.guests[server_id]
    else:
        driver.guests[server_id].power_state = power_state
    await sync_pass(quiet)
    instance = await db_instance(quiet, server_id)
    assert (instance["vm_state"], instance["task_state"], instance["power_state"]) == \
        (states.ACTIVE, None, power_state)
    assert "stop" not in await action_names(quiet, server_id)


@pytest.mark.parametrize("power_state", [states.RUNNING, states.PAUSED_POWER, states.SUSPENDED_POWER])
async def test_f_stopped_but_up_is_powered_off(quiet, power_state):
    (server_id,) = await boot_active(quiet)
    await quiet.action(server_id, {"os-stop": None})
    await quiet.wait_status(server_id, "SHUTOFF")
    guest = quiet.driver("host-1").guests[server_id]
    guest.power_state = power_state
    await sync_pass(quiet)
    server = await quiet.wait_status(server_id, "SHUTOFF", timeout=2)
    assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
    assert guest.power_state == states.SHUTDOWN
    assert (await action_names(quiet, server_id)).count("stop") == 2


@pytest.mark.parametrize("power_state", [states.SHUTDOWN, states.CRASHED, states.NOSTATE])
async def test_f_stopped_and_down_is_left(quiet, power_state):
    (server_id,) = await boot_active(quiet)
    await quiet.action(server_id, {"os-stop": None})
    await quiet.wait_status(server_id, "SHUTOFF")
    driver = quiet.driver("host-1")
    if power_state == states.NOSTATE:
        del driver.guests[server_id]
    else:
        driver.guests[server_id].power_state = power_state
    await sync_pass(quiet)
    instance = await db_instance(quiet, server_id)
    assert (instance["vm_state"], instance["task_state"], instance["power_state"]) == \
        (states.STOPPED, None, power_state)
    if power_state != states.NOSTATE:
        assert driver.guests[server_id].power_state == power_state
    assert (await action_names(quiet, server_id)).count("stop") == 1


async def test_a_pass_is_bounded_and_covers_every_instance(tmp_path, monkeypatch):
    from nefos.host.compute import power_sync
    running, most = set(), set()
    synced = power_sync.sync_instance_power_state

    async def counted(manager, uuid, **kwargs):
        running.add(uuid)
        most.add(len(running))
        try:
            return await synced(manager, uuid, **kwargs)
        finally:
            running.discard(uuid)
    monkeypatch.setattr(power_sync, "sync_instance_power_state", counted)
    cloud = await start_cloud(tmp_path, fake_hosts=1, handle_virt_lifecycle_events=False,
                              sync_power_state_interval=-1, sync_power_state_pool_size=2)
    try:
        ids = await boot_active(cloud, count=5)
        driver = cloud.driver("host-1")
        for server_id in ids:
            driver.guests[server_id].power_state = states.SHUTDOWN
        await sync_pass(cloud)
        assert max(most) == 2  # sync_power_state_pool_size at once, never more
        for server_id in ids:
            await cloud.wait_status(server_id, "SHUTOFF", timeout=2)
    finally:
        await stop_cloud(cloud)


async def test_a_concurrent_operation_wins_over_the_sync(quiet):
    """The sync's writes are compare-and-swaps on task_state None: an API action started after
    the sync read the instance makes the sync back off."""
    from nefos.host.compute import power_sync
    (server_id,) = await boot_active(quiet)
    manager = compute_component(quiet, "host-1").manager
    instance = await db_instance(quiet, server_id)
    quiet.driver("host-1").guests[server_id].power_state = states.SHUTDOWN
    await set_instance(quiet, server_id, task_state=states.REBOOTING_HARD)  # the API got there first
    stop_ctx = await power_sync._apply_rules(manager, instance, states.SHUTDOWN, "test")
    assert stop_ctx is None
    instance = await db_instance(quiet, server_id)
    assert (instance["vm_state"], instance["task_state"], instance["power_state"]) == \
        (states.ACTIVE, states.REBOOTING_HARD, states.RUNNING)
