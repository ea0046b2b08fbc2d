"""Hypervisor lifecycle events: out-of-band changes reach the database through events."""

from __future__ import annotations

import asyncio
import time
import uuid as uuidlib

import pytest

from nefos.model import states
from nefos.host.virt import event as virtevent
from tests.compute.conftest import (FAST, action_names, boot_active, compute_component, db_instance,
                                    eventually, lifecycle_idle)
from tests.clouds import start_cloud, stop_cloud

# Nefos's shipped defaults (Nova's 15 s lifecycle_stopped_delay among them), and the tuned ones.
SHIPPED = {"sync_power_state_interval": -1}  # the periodic sync must not help


@pytest.fixture(params=["shipped defaults", "tuned"])
async def cloud(tmp_path, request):
    harness = await start_cloud(tmp_path, fake_hosts=1, **(SHIPPED if request.param == "shipped defaults" else FAST))
    yield harness
    await stop_cloud(harness)


async def test_out_of_band_stop_is_shutoff_within_a_second(cloud):
    (server_id,) = await boot_active(cloud)
    driver = cloud.driver("host-1")
    started = time.monotonic()
    driver.simulate_power_off(server_id)
    server = await cloud.wait_status(server_id, "SHUTOFF", timeout=1.0)
    assert time.monotonic() - started < 1.0
    assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
    assert server["OS-EXT-STS:vm_state"] == states.STOPPED
    assert driver.guests[server_id].power_state == states.SHUTDOWN
    # Stopped the way the API stops a server: a "stop" action, power_off notifications.
    assert "stop" in await action_names(cloud, server_id)
    await eventually(lambda: _notified(cloud, server_id, "instance.power_off.end"), timeout=1.0)
    # And it can be started again as usual.
    await cloud.action(server_id, {"os-start": None})
    await cloud.wait_status(server_id, "ACTIVE")
    assert driver.guests[server_id].power_state == states.RUNNING


async def _notified(cloud, server_id, event_type):
    return any(n["event_type"] == event_type and n["payload"]["nova_object.data"]["uuid"] == server_id
               for n in cloud.notifications)


async def test_out_of_band_crash_is_shutoff(cloud):
    (server_id,) = await boot_active(cloud)
    cloud.driver("host-1").simulate_crash(server_id)
    server = await cloud.wait_status(server_id, "SHUTOFF", timeout=1.0)
    assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN


async def test_out_of_band_start_of_stopped_server_is_powered_off_again(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"os-stop": None})
    await cloud.wait_status(server_id, "SHUTOFF")
    driver = cloud.driver("host-1")
    driver.simulate_power_on(server_id)
    await eventually(lambda: _guest_state(driver, server_id, states.SHUTDOWN), timeout=1.0)
    server = await cloud.wait_status(server_id, "SHUTOFF")
    assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN


async def _guest_state(driver, server_id, power_state):
    return driver.guests[server_id].power_state == power_state


async def test_reboot_produces_no_spurious_shutoff(tmp_path, monkeypatch):
    """A Stopped that a Started may follow is held and dropped when the Started comes: during a
    hard reboot of Nefos's own, and when the hypervisor says the guest may start again (libvirt:
    a migration, a snapshot restore). Any other Stopped is acted on at once."""
    from nefos.host.compute import lifecycle, power_sync
    handled: list[str] = []
    original = power_sync.sync_instance_power_state

    async def spy(manager, uuid, *, source="periodic sync", **kwargs):
        handled.append(source)
        await original(manager, uuid, source=source, **kwargs)
    monkeypatch.setattr(lifecycle.power_sync, "sync_instance_power_state", spy)
    delay = 0.4
    cloud = await start_cloud(tmp_path, fake_hosts=1, lifecycle_stopped_delay=delay,
                              sync_power_state_interval=-1)
    try:
        (server_id,) = await boot_active(cloud)
        driver = cloud.driver("host-1")
        # A hard reboot emits Stopped then Started.
        await cloud.action(server_id, {"reboot": {"type": "HARD"}})
        await cloud.wait_status(server_id, "ACTIVE")
        # Out of band, a stop the hypervisor says a start may follow, and the start.
        driver.simulate_power_off(server_id, may_restart=True)
        await asyncio.sleep(delay / 4)
        driver.simulate_power_on(server_id)
        await eventually(lambda: lifecycle_idle(cloud, "host-1"), timeout=delay + 10)
        server = await cloud.wait_status(server_id, "ACTIVE")
        assert server["OS-EXT-STS:power_state"] == states.RUNNING
        assert "stop" not in await action_names(cloud, server_id)
        assert not compute_component(cloud, "host-1").manager.lifecycle._held
        # Each held Stopped event was dropped when Started followed: only Started was handled.
        assert "lifecycle event Started" in handled and "lifecycle event Stopped" not in handled

        # Such a Stopped that nothing follows is acted on once the delay has passed, not before.
        started = time.monotonic()
        driver.simulate_power_off(server_id, may_restart=True)
        await asyncio.sleep(delay / 2)
        assert (await db_instance(cloud, server_id))["vm_state"] == states.ACTIVE
        await cloud.wait_status(server_id, "SHUTOFF", timeout=delay + 2)
        assert time.monotonic() - started >= delay
    finally:
        await stop_cloud(cloud)


async def test_a_stop_with_nothing_in_flight_costs_no_delay_with_the_shipped_defaults(tmp_path):
    """With the shipped 15 s delay: a hard reboot still shows no SHUTOFF (its Stopped comes while the
    reboot holds the guest), while an out-of-band stop is SHUTOFF within a second."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, **SHIPPED)
    try:
        assert cloud.rt.cfg.lifecycle_stopped_delay == 15.0
        (server_id,) = await boot_active(cloud)
        await cloud.action(server_id, {"reboot": {"type": "HARD"}})
        await cloud.wait_status(server_id, "ACTIVE")
        assert "stop" not in await action_names(cloud, server_id)
        assert compute_component(cloud, "host-1").manager.lifecycle._held == {}  # dropped by Started
        started = time.monotonic()
        cloud.driver("host-1").simulate_power_off(server_id)
        await cloud.wait_status(server_id, "SHUTOFF", timeout=1.0)
        assert time.monotonic() - started < 1.0
    finally:
        await stop_cloud(cloud)


async def test_a_delayed_started_handler_does_not_act_on_a_later_stop(tmp_path):
    """A Started event whose handling is delayed (the instance lock is busy) until after the guest
    stopped again must not stop the server: the Stopped event that followed decides, after its
    hold delay. The race that made a guest reboot end SHUTOFF on a loaded machine."""
    delay = 0.4
    cloud = await start_cloud(tmp_path, fake_hosts=1, lifecycle_stopped_delay=delay,
                              sync_power_state_interval=-1)
    try:
        (server_id,) = await boot_active(cloud)
        driver = cloud.driver("host-1")
        manager = compute_component(cloud, "host-1").manager
        async with manager.instance_lock(server_id):
            driver.emit_event(virtevent.LifecycleEvent(uuid=server_id,
                                                       transition=virtevent.EVENT_LIFECYCLE_STARTED))
            await eventually(lambda: _lock_wanted_twice(manager, server_id))  # the Started handler waits for it
            driver.simulate_power_off(server_id)  # its Stopped event is held
            stopped_at = time.monotonic()
        await asyncio.sleep(delay / 2)
        assert (await db_instance(cloud, server_id))["vm_state"] == states.ACTIVE
        assert "stop" not in await action_names(cloud, server_id)
        await cloud.wait_status(server_id, "SHUTOFF", timeout=delay + 2)
        assert time.monotonic() - stopped_at >= delay
        assert (await action_names(cloud, server_id)).count("stop") == 1
    finally:
        await stop_cloud(cloud)


async def _lock_wanted_twice(manager, server_id) -> bool:
    """The instance's lock is held and one more wants it."""
    return manager._lock_users.get(server_id, 0) >= 2


async def test_events_off_leaves_it_to_the_periodic_sync(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, handle_virt_lifecycle_events=False,
                              lifecycle_stopped_delay=0, sync_power_state_interval=-1)
    try:
        (server_id,) = await boot_active(cloud)
        cloud.driver("host-1").simulate_power_off(server_id)
        assert await lifecycle_idle(cloud, "host-1")  # the event was dropped as it came
        instance = await db_instance(cloud, server_id)
        assert (instance["vm_state"], instance["power_state"]) == (states.ACTIVE, states.RUNNING)
    finally:
        await stop_cloud(cloud)


async def test_periodic_sync_converges_without_events(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, handle_virt_lifecycle_events=False,
                              lifecycle_stopped_delay=0, sync_power_state_interval=0.2)
    try:
        ids = await boot_active(cloud, count=3)
        driver = cloud.driver("host-1")
        driver.simulate_power_off(ids[0])
        driver.simulate_crash(ids[1])
        driver.guests[ids[2]].power_state = states.PAUSED_POWER  # no event at all
        for server_id in ids[:2]:
            server = await cloud.wait_status(server_id, "SHUTOFF", timeout=5)
            assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
        await eventually(lambda: _db_power(cloud, ids[2], states.PAUSED_POWER), timeout=5)
        assert (await db_instance(cloud, ids[2]))["vm_state"] == states.ACTIVE
    finally:
        await stop_cloud(cloud)


async def _db_power(cloud, server_id, power_state):
    return (await db_instance(cloud, server_id))["power_state"] == power_state


async def test_events_for_unknown_or_foreign_instances_are_ignored(cloud2):
    (on_host2,) = await boot_active(cloud2, host="host-2")
    driver1 = cloud2.driver("host-1")
    # A guest host-1 knows nothing about, and one the database places on host-2.
    driver1.emit_event(virtevent.LifecycleEvent(uuid=str(uuidlib.uuid4()),
                                                transition=virtevent.EVENT_LIFECYCLE_STOPPED))
    driver1.emit_event(virtevent.LifecycleEvent(uuid=on_host2, transition=virtevent.EVENT_LIFECYCLE_STOPPED))
    driver1.emit_event(virtevent.LifecycleEvent(uuid=on_host2, transition=virtevent.EVENT_LIFECYCLE_PAUSED))
    await eventually(lambda: lifecycle_idle(cloud2, "host-1"), timeout=10)
    instance = await db_instance(cloud2, on_host2)
    # host-1 has no such guest: had it acted, power_state would be NOSTATE.
    assert (instance["vm_state"], instance["power_state"]) == (states.ACTIVE, states.RUNNING)
    assert compute_component(cloud2, "host-1").manager._locks == {}


async def test_events_wait_for_a_running_operation(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_power_delay=0.3, **FAST)
    try:
        (server_id,) = await boot_active(cloud)
        # A pause is under way (task_state pausing) when the guest is stopped behind its back:
        # the event does nothing until the pause finishes; it then sees a paused instance (rule d).
        await cloud.action(server_id, {"pause": None})
        cloud.driver("host-1").simulate_power_off(server_id)
        server = await cloud.wait_status(server_id, {"PAUSED", "SHUTOFF"})
        await eventually(lambda: lifecycle_idle(cloud, "host-1"), timeout=10)
        server = await cloud.server(server_id)
        assert server["status"] == "PAUSED" and server["OS-EXT-STS:task_state"] is None
    finally:
        await stop_cloud(cloud)


async def test_stopping_a_host_does_not_record_its_guests_as_stopped(cloud):
    (server_id,) = await boot_active(cloud)
    component = compute_component(cloud, "host-1")
    await component.stop()  # unregisters the listener before anything else
    driver = component.driver
    assert driver._event_callback is None
    # The hypervisor shuts its guests down as the host goes away: the event reaches nobody.
    driver.simulate_power_off(server_id)
    assert await lifecycle_idle(cloud, "host-1")
    instance = await db_instance(cloud, server_id)
    assert (instance["vm_state"], instance["power_state"]) == (states.ACTIVE, states.RUNNING)
