"""init_host: a compute host restarted after a crash brings every instance back to a
consistent state, with the same hypervisor (the guests survived), leaking no claim, port or quota."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from nefos.objects import actions, allocations
from nefos.model import states
from nefos.host.virt.fake import FakeGuest
from tests.compute.conftest import (boot_active, crash_compute, db_instance, set_instance, start_compute)
from tests.clouds import start_cloud, stop_cloud


async def project_usage(cloud) -> dict:
    from nefos.context import DEFAULT_PROJECT_ID
    usage = await cloud.quota_usage(DEFAULT_PROJECT_ID)
    return {k: usage[k] for k in ("instances", "cores", "ram")}


async def delete_all(cloud, ids) -> None:
    for server_id in ids:
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}")
        if r.status_code == 404:
            continue
        r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
        assert r.status_code == 204, r.text
    for server_id in ids:
        await cloud.wait_gone(server_id)


async def assert_no_leaks(cloud, ids) -> None:
    for server_id in ids:
        assert await cloud.ports(device_id=server_id) == [], server_id
        for host in cloud.hosts:
            assert server_id not in cloud.driver(host).guests, (server_id, host)
    usage = await cloud.hypervisor_usage()
    assert usage == {"vcpus_used": 0, "memory_mb_used": 0, "running_vms": 0, "allocations": 0}, usage
    assert await project_usage(cloud) == {"instances": 0, "cores": 0, "ram": 0}


async def record(cloud, uuid: str, action: str) -> str:
    """The action the API would have recorded before the crash; returns its request id."""
    from nefos.context import RequestContext
    ctx = RequestContext()
    await actions.record_action(cloud.rt.db, ctx, uuid, action)
    return ctx.request_id


async def record_evacuation(cloud, uuid: str, status: str) -> str:
    """An evacuation of ``uuid`` from host-1 to host-2 with ``status``, as the API and the destination
    record it; returns its uuid."""
    from nefos.context import RequestContext
    from nefos.objects import migrations
    migration = {"uuid": str(uuidlib.uuid4()), "type": "evacuation", "status": status,
                 "source_compute": "host-1", "source_node": "host-1"}
    async with cloud.rt.db.transaction() as s:
        await migrations.create(s, migration, await db_instance(cloud, uuid), RequestContext())
        await migrations.update_record(None, migration["uuid"], session=s, dest_compute="host-2",
                                       dest_node="host-2")
    return migration["uuid"]


async def migration_status(cloud, migration_uuid: str) -> str:
    from nefos.objects import migrations
    (row,) = await migrations.list_migrations(cloud.rt.db, {"uuid": migration_uuid})
    return row["status"]


async def action_detail(cloud, server_id: str, request_id: str) -> dict:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
    assert r.status_code == 200, r.text
    return r.json()["instanceAction"]


async def test_restart_recovers_every_interrupted_operation(cloud):
    names = ["spawning", "networking", "hard_reboot", "soft_reboot_done", "soft_reboot_down",
             "deleting", "powering_off", "powering_on", "pausing", "untouched"]
    ids = dict(zip(names, await boot_active(cloud, count=len(names))))
    await cloud.action(ids["powering_on"], {"os-stop": None})
    await cloud.wait_status(ids["powering_on"], "SHUTOFF")
    assert await allocations.get(cloud.rt.db, ids["spawning"]) is not None
    assert await cloud.ports(device_id=ids["spawning"])

    old = await crash_compute(cloud, "host-1")
    driver = old.driver
    guests = driver.guests
    # What the dead process was doing, as the database and the hypervisor were left:
    await set_instance(cloud, ids["spawning"], vm_state=states.BUILDING, task_state=states.SPAWNING,
                       power_state=states.NOSTATE)
    await set_instance(cloud, ids["networking"], vm_state=states.BUILDING, task_state=states.NETWORKING,
                       power_state=states.NOSTATE, network_info=[])
    del guests[ids["networking"]]
    await set_instance(cloud, ids["hard_reboot"], task_state=states.REBOOT_STARTED_HARD)
    reboot_request = await record(cloud, ids["hard_reboot"], actions.REBOOT)
    guests[ids["hard_reboot"]].power_state = states.SHUTDOWN
    await set_instance(cloud, ids["soft_reboot_done"], task_state=states.REBOOT_STARTED)
    await set_instance(cloud, ids["soft_reboot_down"], task_state=states.REBOOTING)
    guests[ids["soft_reboot_down"]].power_state = states.SHUTDOWN
    await set_instance(cloud, ids["deleting"], task_state=states.DELETING)
    delete_request = await record(cloud, ids["deleting"], actions.DELETE)
    await set_instance(cloud, ids["powering_off"], task_state=states.POWERING_OFF)
    await set_instance(cloud, ids["powering_on"], task_state=states.POWERING_ON)
    await set_instance(cloud, ids["pausing"], task_state=states.PAUSING)
    guests[ids["pausing"]].power_state = states.PAUSED_POWER

    await start_compute(cloud, old)

    for name in ("spawning", "networking"):
        server = await cloud.wait_status(ids[name], "ERROR")
        assert "interrupted" in server["fault"]["message"], server["fault"]
        assert ids[name] not in guests
        assert await cloud.ports(device_id=ids[name]) == []
        assert await allocations.get(cloud.rt.db, ids[name]) is None
    for name in ("hard_reboot", "soft_reboot_done", "soft_reboot_down", "powering_on", "untouched"):
        server = await cloud.wait_status(ids[name], "ACTIVE")
        assert server["OS-EXT-STS:power_state"] == states.RUNNING, name
        assert guests[ids[name]].power_state == states.RUNNING, name
    server = await cloud.wait_status(ids["powering_off"], "SHUTOFF")
    assert guests[ids["powering_off"]].power_state == states.SHUTDOWN
    server = await cloud.wait_status(ids["pausing"], "PAUSED")
    assert server["OS-EXT-STS:power_state"] == states.PAUSED_POWER
    await cloud.wait_gone(ids["deleting"])
    assert ids["deleting"] not in guests
    assert await cloud.ports(device_id=ids["deleting"]) == []
    assert await allocations.get(cloud.rt.db, ids["deleting"]) is None

    # The resumed work is recorded under the user's original actions, which are now finished.
    detail = await action_detail(cloud, ids["hard_reboot"], reboot_request)
    assert "compute_reboot_instance" in [e["event"] for e in detail["events"]]  # (then its vif wait)
    r = await cloud.compute.get(f"/v2.1/servers/{ids['deleting']}/os-instance-actions/{delete_request}",
                                headers={"X-OpenStack-Nova-API-Version": "2.21"})
    if r.status_code == 200:
        assert r.json()["instanceAction"]["events"][-1]["event"] == "compute_terminate_instance"

    # Nothing leaked: once everything is deleted, every counter is back to zero.
    await delete_all(cloud, list(ids.values()))
    await assert_no_leaks(cloud, list(ids.values()))


async def _steps_and_action(cloud, request_id: str) -> tuple[list[tuple], tuple]:
    """(event, result, ended, details) of each step of the request's action, and (finished, message)."""
    from sqlalchemy import select
    from nefos.db.models import InstanceAction, InstanceActionEvent
    async with cloud.rt.db.reader() as s:
        action = (await s.execute(select(InstanceAction).where(InstanceAction.request_id == request_id))).scalar_one()
        events = (await s.execute(select(InstanceActionEvent).where(InstanceActionEvent.action_id == action.id)
                                  .order_by(InstanceActionEvent.id))).scalars().all()
    return ([(e.event, e.result, e.finish_time is not None, e.details) for e in events],
            (action.finish_time is not None, action.message))


async def test_steps_a_killed_process_left_open_end_with_the_actions_that_are_over(cloud):
    """The process was killed inside steps: after its last save (the server has no task any more,
    the step and action were never finished), in the middle of one (the server is still in its
    task: recovery resumes it), and on a server whose action has a step of another service still
    open. None of these steps can be finished by anyone once the host starts again."""
    from nefos.context import RequestContext
    names = ["saved", "mid_reboot", "other_step_open"]
    ids = dict(zip(names, await boot_active(cloud, count=len(names))))
    old = await crash_compute(cloud, "host-1")
    requests = {name: await record(cloud, ids[name], actions.REBOOT) for name in names}
    for name in names:
        assert await actions.event_start(cloud.rt.db, RequestContext(request_id=requests[name]), ids[name],
                                         "compute_reboot_instance", "host-1") is not None
    await actions.event_start(cloud.rt.db, RequestContext(request_id=requests["other_step_open"]),
                              ids["other_step_open"], "conductor_other_step", None)
    await set_instance(cloud, ids["mid_reboot"], task_state=states.REBOOT_STARTED)

    await start_compute(cloud, old)

    await cloud.wait_status(ids["mid_reboot"], "ACTIVE")
    interrupted = ("compute_reboot_instance", "Error", True,
                   "the step was interrupted by a restart of compute host host-1")
    steps, action = await _steps_and_action(cloud, requests["saved"])
    assert (steps, action) == ([interrupted], (True, "Error"))
    steps, action = await _steps_and_action(cloud, requests["mid_reboot"])
    assert steps == [interrupted] and action[0], (steps, action)  # recovery finished it
    steps, action = await _steps_and_action(cloud, requests["other_step_open"])
    assert steps == [interrupted, ("conductor_other_step", None, False, None)], steps
    assert action == (False, None)  # its other step may still end it
    for server_id in ids.values():
        assert (await cloud.server(server_id))["status"] == "ACTIVE"

    # A quiet restart ends nothing more.
    await start_compute(cloud, await crash_compute(cloud, "host-1"))
    assert (await _steps_and_action(cloud, requests["other_step_open"]))[1] == (False, None)
    await delete_all(cloud, list(ids.values()))
    await assert_no_leaks(cloud, list(ids.values()))


async def test_a_request_sent_while_the_host_recovers_waits_for_it(cloud):
    """The host listens before init_host: a delete sent while it recovers is queued and carried out
    once it is done, not refused and left to the lost-request pass (rpc_response_timeout, the
    shipped 60 s, later)."""
    import asyncio
    from nefos.host.compute.service import ComputeComponent
    (server_id,) = await boot_active(cloud)
    old = await crash_compute(cloud, "host-1")
    new = ComputeComponent(cloud.rt, old.host, driver=old.driver)
    recovering, release = asyncio.Event(), asyncio.Event()
    init_host = new.manager.init_host

    async def held_init_host():  # a delete after its read of the host's instances, before it serves
        await init_host()
        recovering.set()
        await release.wait()
    new.manager.init_host = held_init_host
    starting = asyncio.create_task(new.start())
    await recovering.wait()
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204, r.text
    assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] == states.DELETING
    release.set()
    await starting
    for lst in (cloud.cloud.components, cloud.cloud._started):
        lst[lst.index(old)] = new
    assert cloud.rt.cfg.rpc_response_timeout == 60
    await cloud.wait_gone(server_id, timeout=15)
    await assert_no_leaks(cloud, [server_id])


async def test_restart_destroys_guests_only_with_positive_evidence(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=2, lifecycle_stopped_delay=0, sync_power_state_interval=-1)
    try:
        deleted, moved, kept, unproven, evacuating = await boot_active(cloud, count=5, host="host-1")
        old = await crash_compute(cloud, "host-1")
        driver = old.driver
        # `deleted` was deleted while its host was down (the API's local delete) ...
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers={
            "X-OpenStack-Nova-API-Version": "2.11"}, json={"host": "host-1", "binary": "nova-compute",
                                                            "forced_down": True})
        assert r.status_code == 200, r.text
        r = await cloud.compute.delete(f"/v2.1/servers/{deleted}")
        assert r.status_code == 204, r.text
        await cloud.wait_gone(deleted)
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers={
            "X-OpenStack-Nova-API-Version": "2.11"}, json={"host": "host-1", "binary": "nova-compute",
                                                            "forced_down": False})
        assert r.status_code == 200, r.text
        # ... `moved` now lives on host-2, evacuated there (its evacuation from host-1 is done) ...
        await set_instance(cloud, moved, host="host-2", node="host-2")
        moved_evacuation = await record_evacuation(cloud, moved, "done")
        # ... `unproven` lives on host-2 too, but no evacuation says why (a resize's kept guest, say) ...
        await set_instance(cloud, unproven, host="host-2", node="host-2")
        # ... `evacuating` is being evacuated: it still names host-1, its destination decides ...
        in_progress = await record_evacuation(cloud, evacuating, "pre-migrating")
        await set_instance(cloud, evacuating, task_state=states.REBUILDING)
        moved_ports = {p["id"]: p["fixed_ips"] for p in await cloud.ports(device_id=moved)}
        assert moved_ports
        # ... and a guest no instance record knows about.
        stranger = str(uuidlib.uuid4())
        driver.guests[stranger] = FakeGuest(uuid=stranger, name="stranger", power_state=states.RUNNING,
                                            vcpus=1, memory_mb=64)
        assert {deleted, moved, kept, stranger, unproven, evacuating} <= set(driver.guests)

        await start_compute(cloud, old)

        assert deleted not in driver.guests and moved not in driver.guests
        assert stranger in driver.guests and kept in driver.guests
        assert unproven in driver.guests and evacuating in driver.guests  # no proof / still this host's
        assert await migration_status(cloud, moved_evacuation) == "completed"
        assert await migration_status(cloud, in_progress) == "pre-migrating"
        assert (await db_instance(cloud, evacuating))["task_state"] == states.REBUILDING  # left to the evacuation
        # The moved instance keeps what belongs to it on its new host.
        # (their status aside: this test moved the record only, so the ports are still bound here and
        # the local guest's unplugged VIFs report them down)
        assert {p["id"]: p["fixed_ips"] for p in await cloud.ports(device_id=moved)} == moved_ports
        assert await allocations.get(cloud.rt.db, moved) is not None
        instance = await db_instance(cloud, moved)
        assert (instance["host"], instance["vm_state"]) == ("host-2", states.ACTIVE)
        server = await cloud.wait_status(kept, "ACTIVE")
        assert server["OS-EXT-STS:power_state"] == states.RUNNING

        del driver.guests[stranger]
        await set_instance(cloud, unproven, host="host-1", node="host-1")
        await set_instance(cloud, evacuating, task_state=None)
        await delete_all(cloud, [moved, kept, unproven, evacuating])
        await assert_no_leaks(cloud, [deleted, moved, kept, unproven, evacuating])
    finally:
        await stop_cloud(cloud)


@pytest.mark.parametrize("resume", [True, False])
async def test_guests_down_after_a_host_reboot(tmp_path, resume):
    cloud = await start_cloud(tmp_path, fake_hosts=1, lifecycle_stopped_delay=0, sync_power_state_interval=-1,
                              resume_guests_state_on_host_boot=resume)
    try:
        running, stopped = await boot_active(cloud, count=2)
        await cloud.action(stopped, {"os-stop": None})
        await cloud.wait_status(stopped, "SHUTOFF")
        old = await crash_compute(cloud, "host-1")
        for guest in old.driver.guests.values():  # the host rebooted: every guest is off
            guest.power_state = states.SHUTDOWN
        await start_compute(cloud, old)
        if resume:
            server = await cloud.wait_status(running, "ACTIVE")
            assert server["OS-EXT-STS:power_state"] == states.RUNNING
            assert old.driver.guests[running].power_state == states.RUNNING
        else:
            # Nobody restarts it: the final power-state sync records it as stopped (rule e).
            server = await cloud.wait_status(running, "SHUTOFF")
            assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
        server = await cloud.wait_status(stopped, "SHUTOFF")
        assert old.driver.guests[stopped].power_state == states.SHUTDOWN
        await delete_all(cloud, [running, stopped])
        await assert_no_leaks(cloud, [running, stopped])
    finally:
        await stop_cloud(cloud)


async def test_restart_of_a_quiet_host_changes_nothing(cloud):
    ids = await boot_active(cloud, count=2)
    before = {i: await db_instance(cloud, i) for i in ids}
    usage = await cloud.hypervisor_usage()
    old = await crash_compute(cloud, "host-1")
    await start_compute(cloud, old)
    for i in ids:
        after = await db_instance(cloud, i)
        for key in ("vm_state", "task_state", "power_state", "host", "network_info"):
            assert after[key] == before[i][key], key
    assert await cloud.hypervisor_usage() == usage


async def test_a_host_whose_identity_call_is_lost_at_start_asks_again(tmp_path, monkeypatch, caplog):
    """The broker restarts just as a compute host starts: its first call after the conductor answered
    (who this host is) loses its connection, and so its answer. The host asks again once the bus is
    back and starts, rather than failing its start (the process exiting with status 1)."""
    from nefos import exceptions
    from nefos.clients.conductor import ConductorAPI
    real = ConductorAPI.compute_node_identity
    lost = []

    async def lost_once(self, ctx, host_name, recorded):
        if not lost:
            lost.append(host_name)
            raise exceptions.ServiceUnavailable("the connection to the message bus was lost before the answer came")
        return await real(self, ctx, host_name, recorded)

    monkeypatch.setattr(ConductorAPI, "compute_node_identity", lost_once)
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        assert lost == ["host-1"]
        assert "waiting for a conductor (the connection to the message bus was lost" in caplog.text
        (server_id,) = await boot_active(cloud)
        assert (await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"] == "host-1"
    finally:
        await stop_cloud(cloud)
