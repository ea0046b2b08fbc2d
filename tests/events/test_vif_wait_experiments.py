"""VIF-plugged waits end to end: the L2 agent stopped (fatal or not), and the normal flow.

Everything through the real pipeline: the Compute API, the conductor and
scheduler, the compute host with the fake driver and its fake L2 agent, the
network service with its notifier posting to the Compute API over HTTP.
"""

from __future__ import annotations

import time

from nefos.model import states
from tests.events.conftest import QUICK, action_events, agent, boot, eventually, port_of
from tests.clouds import start_cloud, stop_cloud


async def test_agent_stopped_not_fatal_then_started(tmp_path):
    """The L2 agent stopped, vif_plugging_is_fatal False, agent off: ACTIVE with the port DOWN; agent on: ACTIVE port."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, vif_plugging_timeout=1.0, vif_plugging_is_fatal=False,
                              **QUICK)
    try:
        host = cloud.hosts[0]
        await agent(cloud, host).stop()
        started = time.monotonic()
        server_id = await boot(cloud)
        server = await cloud.wait_status(server_id, "ACTIVE")
        assert time.monotonic() - started >= 1.0  # it waited vif_plugging_timeout, then carried on
        assert server["OS-EXT-STS:power_state"] == states.RUNNING
        assert cloud.driver(host).guests[server_id].power_state == states.RUNNING  # resumed anyway
        port = await port_of(cloud, server_id)
        assert port["status"] == "DOWN"
        waits = [e for e in await action_events(cloud, server_id) if e["event"] == "compute_wait_for_vif_plugged"]
        assert len(waits) == 1 and waits[0]["result"] == "Warning"
        assert "timed out" in waits[0]["details"] and f"network-vif-plugged-{port['id']} missing" in waits[0]["details"]

        # The agent comes back: it finds the plugged device, the port goes ACTIVE and the event
        # reaches the compute host, which records it (nobody waits for it any more).
        await agent(cloud, host).start()
        await eventually(lambda: _port_active(cloud, server_id))

        async def processed():
            return [e for e in await action_events(cloud, server_id)
                    if e["event"] == "compute_external_instance_event"
                    and e["details"].startswith(f"network-vif-plugged-{port['id']}")]
        recorded = await eventually(processed)
        assert recorded[0]["result"] == "Success" and "unexpected" in recorded[0]["details"]
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
        assert "external_instance_event" not in [a["action"] for a in r.json()["instanceActions"]]
        assert any(e["event"] == "api_external_instance_event" for e in await action_events(cloud, server_id))
        assert (await cloud.server(server_id))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


async def _port_active(cloud, server_id):
    return (await port_of(cloud, server_id))["status"] == "ACTIVE"


async def test_agent_stopped_fatal(tmp_path):
    """The L2 agent stopped, fatal: ERROR after vif_plugging_timeout, VirtualInterfaceCreateException, nothing left."""
    cloud = await start_cloud(tmp_path, fake_hosts=2, vif_plugging_timeout=1.0, vif_plugging_is_fatal=True,
                              **QUICK)
    try:
        for host in cloud.hosts:
            await agent(cloud, host).stop()
        started = time.monotonic()
        server_id = await boot(cloud)
        server = await cloud.wait_status(server_id, "ERROR")
        elapsed = time.monotonic() - started
        assert 1.0 <= elapsed < 5.0, elapsed  # after the timeout, and no reschedule to the other host
        assert "VirtualInterfaceCreateException" in server["fault"]["message"]
        assert "not rescheduling" in server["fault"]["message"]
        assert "VirtualInterfaceCreateException" in server["fault"]["details"]  # admin sees the traceback
        events = await action_events(cloud, server_id)
        builds = [e for e in events if e["event"] == "compute__do_build_and_run_instance"]
        assert len(builds) == 1 and builds[0]["result"] == "Error"  # tried once: no reschedule
        wait = [e for e in events if e["event"] == "compute_wait_for_vif_plugged"]
        assert len(wait) == 1 and wait[0]["result"] == "Error" and "timed out" in wait[0]["details"]
        # The guest is gone, its VIFs unplugged, the ports deleted, the claim released.
        for host in cloud.hosts:
            assert server_id not in cloud.driver(host).guests
            assert server_id not in cloud.driver(host).plugged_vifs.values()
        assert await cloud.ports(device_id=server_id) == []
        usage = await cloud.hypervisor_usage()
        assert usage["vcpus_used"] == 0 and usage["memory_mb_used"] == 0 and usage["allocations"] == 0
        assert (await cloud.quota_usage("00000000000000000000000000000001"))["instances"] == 1  # ERROR counts
        # Deleting the failed server gives the quota back.
        assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
        await cloud.wait_gone(server_id)
        assert (await cloud.quota_usage("00000000000000000000000000000001"))["instances"] == 0
    finally:
        await stop_cloud(cloud)


async def test_normal_flow_guest_paused_until_the_event(tmp_path):
    """The normal flow: the guest is created paused and runs only once network-vif-plugged arrived."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_l2_agent_delay=0.3, **QUICK)
    try:
        host = cloud.hosts[0]
        manager = cloud.compute_manager(host)
        driver = cloud.driver(host)
        seen = []  # (guest power state, server vm_state, port status) when the event reaches the host
        original = manager.instance_events.external_instance_event

        async def spy(ctx, events):
            for event in events:
                guest = driver.guests.get(event["instance_uuid"])
                seen.append((event["name"], time.monotonic(), guest.power_state if guest else None,
                             (await cloud.server(event["instance_uuid"]))["status"]))
            await original(ctx, events)
        manager.instance_events.external_instance_event = spy

        server_id = await boot(cloud)
        server = await cloud.wait_status(server_id, "ACTIVE")
        port = await port_of(cloud, server_id)
        assert port["status"] == "ACTIVE" and port["binding:vif_details"]["vif_plugged_event"] == "plug"
        guest = driver.guests[server_id]
        assert guest.paused_start
        history = [state for _t, state in guest.history]
        assert history == [states.PAUSED_POWER, states.RUNNING]
        plugged = [s for s in seen if s[0] == "network-vif-plugged"]
        assert len(plugged) == 1
        _name, delivered_at, power_at_delivery, status_at_delivery = plugged[0]
        # When the event arrived the guest was still paused and the server still building...
        assert power_at_delivery == states.PAUSED_POWER and status_at_delivery == "BUILD"
        # ...and it was resumed only after that.
        resumed_at = guest.history[1][0]
        assert resumed_at >= delivered_at
        assert guest.history[0][0] + 0.3 <= resumed_at  # paused at least the agent's delay
        assert server["OS-EXT-STS:power_state"] == states.RUNNING
        wait = [e for e in await action_events(cloud, server_id) if e["event"] == "compute_wait_for_vif_plugged"]
        assert len(wait) == 1 and wait[0]["result"] == "Success"
        assert f"network-vif-plugged-{port['id']} completed after" in wait[0]["details"]
        waited = float(wait[0]["details"].split("waited ")[1].split(" s")[0])
        assert waited >= 0.25  # the agent's delay, measured
    finally:
        await stop_cloud(cloud)
