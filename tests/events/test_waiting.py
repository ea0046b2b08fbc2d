"""Waiting on the compute host: the wait's semantics, the operations that wait, the events
nobody waits for."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select

from nefos import exceptions
from nefos.host.compute.instance_events import InstanceEvents
from nefos.context import admin_context
from nefos.db.models import InstanceFault
from nefos.objects import instance as instance_obj
from nefos.model import states
from tests.events.conftest import QUICK, SERVICE, action_events, agent, boot, eventually, network_net, port_of
from tests.clouds import start_cloud, stop_cloud


async def _active(cloud, **extra) -> tuple[str, dict]:
    server_id = await boot(cloud, **extra)
    await cloud.wait_status(server_id, "ACTIVE")
    return server_id, await instance_obj.get(cloud.rt.db, server_id)


async def _post(cloud, server_id, name="network-vif-plugged", tag=None, status="completed"):
    event = {"name": name, "server_uuid": server_id, "status": status}
    if tag is not None:
        event["tag"] = tag
    r = await cloud.compute.post("/v2.1/os-server-external-events", headers=SERVICE, json={"events": [event]})
    assert r.status_code == 200, r.text


def _events(cloud):
    return cloud.compute_manager(cloud.hosts[0]).instance_events


# The wait itself ------------------------------------------------------------------------------

async def test_names_and_name_tag_pairs(cloud):
    server_id, instance = await _active(cloud)
    events = _events(cloud)
    await events.begin_operation(server_id)
    async with events.wait_for_instance_event(instance, ["network-changed", ("network-vif-plugged", "a")],
                                              deadline=5) as futures:
        await _post(cloud, server_id, "network-vif-plugged", "a")
        await _post(cloud, server_id, "network-changed")
    assert {k: f.result()["status"] for k, f in futures.items()} == {
        ("network-changed", ""): "completed", ("network-vif-plugged", "a"): "completed"}


async def test_the_deadline_raises_timeout(cloud):
    server_id, instance = await _active(cloud)
    events = _events(cloud)
    await events.begin_operation(server_id)
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        async with events.wait_for_instance_event(instance, [("network-vif-plugged", "never")], deadline=0.3):
            pass
    assert 0.3 <= time.monotonic() - started < 10  # the deadline, not some later timer
    assert not events._waiters.get(server_id)  # nothing left registered


async def test_failed_events_go_to_the_callback(cloud):
    server_id, instance = await _active(cloud)
    events = _events(cloud)
    await events.begin_operation(server_id)
    calls = []

    def stop_waiting(name, inst):
        calls.append((name, inst["uuid"]))
        return False  # stop: the second event is not waited for
    async with events.wait_for_instance_event(instance, [("network-vif-plugged", "a"), ("network-vif-plugged", "b")],
                                              deadline=5, error_callback=stop_waiting):
        await _post(cloud, server_id, tag="a", status="failed")
    assert calls == [("network-vif-plugged-a", server_id)]

    def carry_on(name, inst):
        calls.append(name)  # None: wait on for the rest
    with pytest.raises(asyncio.TimeoutError):
        async with events.wait_for_instance_event(instance, [("network-vif-plugged", "c"), ("network-vif-plugged", "d")],
                                                  deadline=0.5, error_callback=carry_on):
            await _post(cloud, server_id, tag="c", status="failed")
    assert calls[-1] == "network-vif-plugged-c"

    with pytest.raises(exceptions.NefosError, match="Instance event failed"):  # the default callback raises
        async with events.wait_for_instance_event(instance, [("network-vif-plugged", "e")], deadline=5):
            await _post(cloud, server_id, tag="e", status="failed")


async def test_an_event_of_an_earlier_operation_never_satisfies_a_later_one(cloud):
    server_id, instance = await _active(cloud)
    events = _events(cloud)
    await events.begin_operation(server_id)
    await _post(cloud, server_id, tag="old")  # nobody waits: kept in the inbox for this operation
    await events.begin_operation(server_id)  # a new operation: the old event is stale
    with pytest.raises(asyncio.TimeoutError):
        async with events.wait_for_instance_event(instance, [("network-vif-plugged", "old")], deadline=0.3):
            pass


# The operations that wait ------------------------------------------------------------------------

async def test_no_wait_when_the_timeout_is_zero(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=0, vif_plugging_is_fatal=False, **QUICK)
    try:
        await agent(cloud, cloud.hosts[0]).stop()  # no event will ever come
        server_id, _ = await _active(cloud)  # ACTIVE although no event ever comes
        guest = cloud.driver(cloud.hosts[0]).guests[server_id]
        assert not guest.paused_start and [s for _t, s in guest.history] == [states.RUNNING]
        assert "compute_wait_for_vif_plugged" not in [e["event"] for e in await action_events(cloud, server_id)]
    finally:
        await stop_cloud(cloud)


async def test_no_wait_when_the_driver_cannot_start_paused(cloud):
    host = cloud.hosts[0]
    cloud.driver(host).supports_paused_start = False
    await agent(cloud, host).stop()
    server_id, _ = await _active(cloud)
    assert not cloud.driver(host).guests[server_id].paused_start
    assert (await port_of(cloud, server_id))["status"] == "DOWN"


async def test_a_failed_vif_plug_is_fatal(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=30, **QUICK)
    try:
        await agent(cloud, cloud.hosts[0]).stop()
        server_id = await boot(cloud)

        async def waiting():
            return [e for e in await action_events(cloud, server_id) if e["event"] == "compute_spawn"
                    and e["result"] == "Success"]
        await eventually(waiting)
        port = await port_of(cloud, server_id)
        network = next(c.manager for c in cloud.cloud.components if getattr(c, "notifier", None) is not None)
        await network.ports.update_port_status(admin_context(), port["id"], "ERROR")  # the agent failed to wire it
        server = await cloud.wait_status(server_id, "ERROR", timeout=10)
        assert "VirtualInterfaceCreateException" in server["fault"]["message"]
        wait = [e for e in await action_events(cloud, server_id) if e["event"] == "compute_wait_for_vif_plugged"]
        assert wait[0]["result"] == "Error" and "failed" in wait[0]["details"]
        assert await cloud.ports(device_id=server_id) == []
    finally:
        await stop_cloud(cloud)


async def test_a_delete_during_the_wait_wins_at_once(tmp_path, monkeypatch):
    # No inbox re-read (and its deleted-instance check) within the test: only the delete's
    # wake-up of the waiter can end the wait in time.
    from nefos.host.compute import instance_events
    monkeypatch.setattr(instance_events, "INBOX_POLL", 60.0)
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=120, **QUICK)
    try:
        host = cloud.hosts[0]
        await agent(cloud, host).stop()
        server_id = await boot(cloud)

        async def paused():
            guest = cloud.driver(host).guests.get(server_id)
            return guest is not None and guest.power_state == states.PAUSED_POWER
        await eventually(paused)
        assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
        # Gone well before the next inbox re-read (60 s) or vif_plugging_timeout (120 s). Not a tight
        # bound: it takes a fraction of a second here, seconds on a loaded two-core machine.
        await cloud.wait_gone(server_id, timeout=30)
        assert server_id not in cloud.driver(host).guests
        assert await cloud.ports(device_id=server_id) == []
        assert (await cloud.hypervisor_usage())["allocations"] == 0
    finally:
        await stop_cloud(cloud)


@pytest.mark.parametrize("action, what", [({"reboot": {"type": "HARD"}}, "hard reboot"), ("start", "start")])
async def test_hard_reboot_and_start_wait_for_the_replugged_vifs(tmp_path, action, what):
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_l2_agent_delay=0.3, **QUICK)
    try:
        server_id, _ = await _active(cloud)
        if action == "start":
            await cloud.action(server_id, {"os-stop": None})
            await cloud.wait_status(server_id, "SHUTOFF")
            action = {"os-start": None}
        started = time.monotonic()
        await cloud.action(server_id, action)
        await cloud.wait_status(server_id, "ACTIVE")
        assert time.monotonic() - started >= 0.3  # the agent's delay: it waited for the event
        waits = [e for e in await action_events(cloud, server_id)
                 if e["event"] == "compute_wait_for_vif_plugged" and e["details"].startswith(what)]
        assert len(waits) == 1 and waits[0]["result"] == "Success", waits
        assert (await port_of(cloud, server_id))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


@pytest.mark.parametrize("fatal", [True, False])
async def test_start_with_the_agent_stopped(tmp_path, fatal):
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=1.0, vif_plugging_is_fatal=fatal,
                              **QUICK)
    try:
        host = cloud.hosts[0]
        server_id, _ = await _active(cloud)
        await cloud.action(server_id, {"os-stop": None})
        await cloud.wait_status(server_id, "SHUTOFF")
        await agent(cloud, host).stop()
        await cloud.action(server_id, {"os-start": None})
        if fatal:
            # The start fails: the guest is powered off again, the server stays SHUTOFF, the fault says why.
            async def failed():
                return [e for e in await action_events(cloud, server_id)
                        if e["event"] == "compute_start_instance" and e["result"] == "Error"]
            await eventually(failed, timeout=10)
            server = await cloud.wait_status(server_id, "SHUTOFF")
            assert cloud.driver(host).guests[server_id].power_state == states.SHUTDOWN
            async with cloud.rt.db.reader() as s:
                faults = (await s.execute(select(InstanceFault.message).where(
                    InstanceFault.instance_uuid == server_id))).scalars().all()
            assert faults == ["Virtual Interface creation failed"]
            waits = [e for e in await action_events(cloud, server_id) if e["event"] == "compute_wait_for_vif_plugged"]
            assert waits[-1]["result"] == "Error" and waits[-1]["details"].startswith("start: timed out")
        else:
            server = await cloud.wait_status(server_id, "ACTIVE", timeout=10)
            waits = [e for e in await action_events(cloud, server_id) if e["event"] == "compute_wait_for_vif_plugged"]
            assert waits[-1]["result"] == "Warning"
    finally:
        await stop_cloud(cloud)


# Events nobody waits for ----------------------------------------------------------------------------

async def test_network_changed_refreshes_only_that_port(cloud):
    net2 = await cloud.make_network(name="second", cidr="10.1.0.0/24")
    net1 = await network_net(cloud)
    created = await cloud.boot(networks=[{"uuid": net1["id"]}, {"uuid": net2["id"]}])
    server_id = created["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")
    instance = await instance_obj.get(cloud.rt.db, server_id)
    first, second = instance["network_info"]
    # Mark the second VIF in the cache (in its binding details, which a refresh rebuilds from the
    # port): a refresh of all ports would overwrite the mark.
    marked = dict(second, details={**(second.get("details") or {}), "marker": "untouched"})
    await instance_obj.save(cloud.rt.db, server_id, {"network_info": [first, marked]})
    r = await cloud.network.put(f"/v2.0/ports/{first['id']}", json={"port": {"fixed_ips": [
        {"subnet_id": (await port_of_id(cloud, first["id"]))["fixed_ips"][0]["subnet_id"],
         "ip_address": "10.0.0.77"}]}})
    assert r.status_code == 200, r.text

    async def refreshed():
        cache = (await instance_obj.get(cloud.rt.db, server_id))["network_info"]
        return cache if cache[0]["network"]["subnets"][0]["ips"][0]["address"] == "10.0.0.77" else None
    cache = await eventually(refreshed)
    assert cache[1] == marked  # the other port was left alone

    async def recorded():  # the event's record is finished after the cache was saved
        details = [e["details"] or "" for e in await action_events(cloud, server_id)
                   if e["event"] == "compute_external_instance_event"]
        return any(d.startswith(f"network-changed-{first['id']}: port refreshed") for d in details)
    assert await eventually(recorded)


async def port_of_id(cloud, port_id):
    return (await cloud.network.get(f"/v2.0/ports/{port_id}")).json()["port"]


async def test_network_vif_deleted_drops_the_vif(cloud):
    net2 = await cloud.make_network(name="second", cidr="10.1.0.0/24")
    net1 = await network_net(cloud)
    created = await cloud.boot(networks=[{"uuid": net1["id"]}, {"uuid": net2["id"]}])
    server_id = created["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")
    first, second = (await instance_obj.get(cloud.rt.db, server_id))["network_info"]
    assert (await cloud.network.delete(f"/v2.0/ports/{second['id']}")).status_code == 204

    async def dropped():
        cache = (await instance_obj.get(cloud.rt.db, server_id))["network_info"]
        return [v["id"] for v in cache] == [first["id"]]
    await eventually(dropped)
    server = await cloud.server(server_id)
    assert list(server["addresses"]) == [net1["name"]]


def test_the_wait_list_comes_from_the_binding_declaration():
    def vif(port, active, trigger=None):
        details = {"port_filter": True}
        if trigger:
            details["vif_plugged_event"] = trigger
        return {"id": port, "active": active, "details": details}
    network_info = [vif("a", False, "plug"), vif("b", True, "plug"), vif("c", False, "bind"), vif("d", False, "none"),
                    vif("e", False), vif("f", True, "bind")]
    assert InstanceEvents.vif_events(network_info) == [
        ("network-vif-plugged", "a"), ("network-vif-plugged", "c"), ("network-vif-plugged", "e")]
    # Re-plugging (start, hard reboot): every plug-time VIF, active or not; bind-time ones are not re-bound.
    assert InstanceEvents.vif_events(network_info, replug=True) == [
        ("network-vif-plugged", "a"), ("network-vif-plugged", "b"), ("network-vif-plugged", "e")]


async def test_a_second_copy_of_a_delivered_event_is_recorded_as_a_duplicate(cloud):
    """The waiter can get its event from the inbox before the bus copy arrives (or the network
    service posts it twice): the later copy is a duplicate, not an "unexpected" event."""
    server_id, instance = await _active(cloud)
    port_id = instance["network_info"][0]["id"]
    await _post(cloud, server_id, tag=port_id)

    async def recorded():
        details = [e["details"] or "" for e in await action_events(cloud, server_id)
                   if e["event"] == "compute_external_instance_event"]
        return [d for d in details if f"network-vif-plugged-{port_id}" in d]
    await eventually(lambda: _count_at_least(recorded, 2))
    copies = await recorded()
    assert "delivered to the waiting operation" in copies[0]
    assert "duplicate" in copies[1] and "unexpected" not in copies[1]
    assert (await cloud.server(server_id))["status"] == "ACTIVE"


async def _count_at_least(source, n):
    return len(await source()) >= n
