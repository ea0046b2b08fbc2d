"""A boot's compute host -> conductor calls: the build's writes ride on as few calls as their order
allows (conductor 1.3 ``instance_progress``); a host pinned to conductor 1.2 makes each write its
own call, as before. Either way the build records the same action events, each finished with the
same result, and the server reaches ACTIVE the same."""

from __future__ import annotations

import collections
import datetime as dt

from tests.clouds import start_cloud, stop_cloud

BUILD_STEPS = ["compute__do_build_and_run_instance", "compute_claim_resources", "compute_allocate_network",
               "compute_prep_block_device", "compute_spawn", "compute_wait_for_vif_plugged",
               "compute_external_instance_event"]
# What a build wrote one call at a time before conductor 1.3.
ONE_WRITE_METHODS = {"instance_save", "action_event_start", "action_event_finish", "action_record_event",
                     "event_operation_begin", "block_device_mappings", "event_inbox_record_processing"}


async def _boot(tmp_path, **overrides) -> tuple[collections.Counter, dict]:
    """One server booted: the conductor methods called meanwhile, and its create action's events."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, **overrides)
    try:
        net = await cloud.make_network()
        calls: collections.Counter = collections.Counter()
        bus = cloud.rt.bus
        real_call = bus.call

        async def counting_call(ctx, topic, method, **kwargs):
            if topic == "conductor":
                calls[method] += 1
            return await real_call(ctx, topic, method, **kwargs)

        bus.call = counting_call
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        server = await cloud.wait_status(server_id, "ACTIVE")
        bus.call = real_call
        assert server["OS-EXT-STS:power_state"] == 1
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
        (action,) = r.json()["instanceActions"]
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{action['request_id']}")
        events = {e["event"]: e for e in r.json()["instanceAction"]["events"]}
        return calls, events
    finally:
        await stop_cloud(cloud)


def _check_steps(events: dict) -> None:
    for step in BUILD_STEPS:
        assert events[step]["result"] == "Success", (step, events[step])
        start, finish = (dt.datetime.fromisoformat(events[step][k]) for k in ("start_time", "finish_time"))
        assert start <= finish, (step, events[step])
    # The build's event ends last, when the server is ACTIVE.
    build_finish = events["compute__do_build_and_run_instance"]["finish_time"]
    assert all(events[step]["finish_time"] <= build_finish for step in BUILD_STEPS[1:-1]), events


async def test_a_boot_writes_in_few_conductor_calls(tmp_path):
    calls, events = await _boot(tmp_path)
    _check_steps(events)
    assert calls["build_started"] == 1
    # The claim's record, the operation, networking and the network's event; block device
    # mapping; the block devices' record and spawning; the network info; the spawn's event (and
    # the inbox read); the spawn's end and the wait's event; the wait's end, the event's delivery
    # record, ACTIVE and the build's end.
    assert calls["instance_progress"] == 7, calls
    assert not {m: n for m, n in calls.items() if m in ONE_WRITE_METHODS}, calls


async def test_a_host_pinned_to_conductor_1_2_writes_one_call_at_a_time(tmp_path):
    calls, events = await _boot(tmp_path, upgrade_levels={"conductor": "1.2"})
    _check_steps(events)
    assert calls["instance_progress"] == 0, calls
    assert calls["build_started"] == 1 and calls["block_device_mappings"] == 1, calls
    assert (calls["instance_save"], calls["action_event_start"], calls["action_event_finish"],
            calls["action_record_event"], calls["event_operation_begin"]) == (5, 3, 4, 2, 1), calls


async def test_a_host_under_a_conductor_older_than_1_3_falls_back_to_one_call_a_write(tmp_path, monkeypatch):
    """No pin on the host (it has no database to find an ``auto`` one in): the conductor refuses
    the first 1.3 call before running anything, and the host sends the 1.2 forms from then on."""
    from nefos.bus import interfaces
    from nefos.bus.versioning import RPCInterface, parse
    from nefos.control.conductor.manager import ConductorManager
    served = RPCInterface("conductor", version="1.2", binary=interfaces.CONDUCTOR.binary, methods={
        m: v for m, v in interfaces.CONDUCTOR.methods.items() if parse(v) <= (1, 2)})
    monkeypatch.setattr(ConductorManager, "rpc_interface", served)
    calls, events = await _boot(tmp_path)
    _check_steps(events)
    # The refused form: build_started with the block devices; nothing of 1.3 after it.
    assert calls["build_started"] == 2 and calls["instance_progress"] == 0, calls
    assert calls["block_device_mappings"] == 1, calls
    assert (calls["instance_save"], calls["action_event_start"], calls["action_event_finish"],
            calls["action_record_event"], calls["event_operation_begin"]) == (5, 3, 4, 2, 1), calls
