"""VIF-plugged gating with real guests: the L2 agent is the one who says a VIF is plugged."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.libvirt.conftest import (
    HOST, allow_icmp, avirsh, make_network, ping_from_dhcp_namespace, start_libvirt_cloud,
    stop_libvirt_cloud, wait_console,
)

pytestmark = pytest.mark.libvirt


async def test_no_l2_agent_no_active_port_and_the_build_fails_cleanly(libvirtd, tmp_path):
    cloud = await start_libvirt_cloud(tmp_path, vif_plugging_timeout=4.0, vif_plugging_is_fatal=True)
    try:
        driver = cloud.driver(HOST)
        net = await make_network(cloud, name="lv-net-4", cidr="10.80.0.0/24")
        await cloud.l2_agent.stop()
        t0 = time.monotonic()
        sid = (await cloud.boot(name="no-agent", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
        # While it waits: created paused, its port DOWN (nobody reported the tap).
        deadline = time.monotonic() + 30
        while (await avirsh("domstate", sid, check=False)) != "paused":
            assert time.monotonic() < deadline, "the guest was never created paused"
            await asyncio.sleep(0.05)
        (port,) = await cloud.ports(device_id=sid)
        assert port["status"] == "DOWN"
        tap = "tap" + port["id"][:11]
        assert os.path.exists(f"/sys/class/net/{tap}")
        server = await cloud.wait_status(sid, "ERROR", timeout=60)
        took = time.monotonic() - t0
        assert "VirtualInterfaceCreateException" in server["fault"]["message"]
        # Nothing left: no domain, no tap, no disks, no port.
        assert sid not in await avirsh("list", "--all", "--uuid")
        assert not os.path.exists(f"/sys/class/net/{tap}")
        assert not (driver.instances_path / sid).exists()
        assert await cloud.ports(device_id=sid) == []
        print(f"\nno L2 agent: ERROR after {took:.2f} s (vif_plugging_timeout 4 s)")

        # The agent back: the next guest boots, its port goes ACTIVE, DHCP gives it its address.
        await cloud.l2_agent.start()
        sid = (await cloud.boot(name="agent-back", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(sid, "ACTIVE", timeout=60)
        (port,) = await cloud.ports(device_id=sid)
        assert port["status"] == "ACTIVE"
        ip = port["fixed_ips"][0]["ip_address"]
        await wait_console(cloud, sid, f"NEFOS-IP: {ip}/24")
        await allow_icmp(cloud, port)
        await ping_from_dhcp_namespace(cloud, net["id"], ip)
        r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
        assert r.status_code == 204
        await cloud.wait_gone(sid, timeout=30)
    finally:
        await stop_libvirt_cloud(cloud)


async def action_events(cloud, uuid: str) -> list[dict]:
    """The instance's action events (event, result, details), oldest first."""
    from sqlalchemy import select

    from nefos.db.models import InstanceAction, InstanceActionEvent
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(InstanceActionEvent.event, InstanceActionEvent.result,
                                       InstanceActionEvent.details)
                                .join(InstanceAction, InstanceActionEvent.action_id == InstanceAction.id)
                                .where(InstanceAction.instance_uuid == uuid)
                                .order_by(InstanceActionEvent.id))).all()
    return [{"event": e, "result": r, "details": d or ""} for e, r, d in rows]


async def test_no_l2_agent_not_fatal_active_without_an_address_until_the_agent_starts(libvirtd, tmp_path):
    """The L2 agent stopped, not fatal: the guest starts (ACTIVE after the timeout) but its port is
    DOWN and it gets no address: nobody wired its tap into the network's bridge. The agent started,
    the port goes ACTIVE (``network-vif-plugged`` reaches the compute host) and DHCP gives the guest
    its port's address."""
    cloud = await start_libvirt_cloud(tmp_path, vif_plugging_timeout=4.0, vif_plugging_is_fatal=False)
    try:
        net = await make_network(cloud, name="lv-net-5", cidr="10.84.0.0/24")
        await cloud.l2_agent.stop()
        t0 = time.monotonic()
        sid = (await cloud.boot(name="no-agent-nf", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(sid, "ACTIVE", timeout=60)
        active_after = time.monotonic() - t0
        assert await avirsh("domstate", sid) == "running"  # resumed without the event
        (port,) = await cloud.ports(device_id=sid)
        assert port["status"] == "DOWN"
        tap, bridge = "tap" + port["id"][:11], "brq" + net["id"][:11]
        assert os.path.exists(f"/sys/class/net/{tap}") and not os.path.exists(f"/sys/class/net/{tap}/master")
        waits = [e for e in await action_events(cloud, sid) if e["event"] == "compute_wait_for_vif_plugged"]
        assert [w["result"] for w in waits] == ["Warning"] and "is False, continuing" in waits[0]["details"]

        # The guest boots and its DHCP client tries: unanswered (its tap is on no bridge).
        out = await wait_console(cloud, sid, "NEFOS-DHCP: no lease on eth0", timeout=60)
        no_lease_after = time.monotonic() - t0
        assert f"NEFOS-MAC: {port['mac_address']}" in out and "NEFOS-IP:" not in out
        assert (await cloud.ports(device_id=sid))[0]["status"] == "DOWN"

        # The agent started: it wires the tap, the port goes ACTIVE, the guest gets its address.
        t1 = time.monotonic()
        await cloud.l2_agent.start()
        ip = port["fixed_ips"][0]["ip_address"]
        out = await wait_console(cloud, sid, f"NEFOS-IP: {ip}/24", timeout=30)
        ip_after = time.monotonic() - t1
        assert out.count("NEFOS-IP:") == 1
        assert os.path.realpath(f"/sys/class/net/{tap}/master").endswith("/" + bridge)
        deadline = time.monotonic() + 15
        while (await cloud.ports(device_id=sid))[0]["status"] != "ACTIVE":
            assert time.monotonic() < deadline, "the port did not go ACTIVE once the agent was back"
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + 15
        while not [e for e in await action_events(cloud, sid) if e["event"] == "compute_external_instance_event"
                   and e["details"].startswith(f"network-vif-plugged-{port['id']}")]:
            assert time.monotonic() < deadline, "no network-vif-plugged recorded in the instance actions"
            await asyncio.sleep(0.1)
        print(f"\nno L2 agent, not fatal: ACTIVE after {active_after:.2f} s (vif_plugging_timeout 4 s), "
              f"'no lease' on the console after {no_lease_after:.2f} s; agent started -> "
              f"NEFOS-IP {ip} after {ip_after:.2f} s")
        r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
        assert r.status_code == 204
        await cloud.wait_gone(sid, timeout=30)
        assert not os.path.exists(f"/sys/class/net/{tap}")
    finally:
        await stop_libvirt_cloud(cloud)
