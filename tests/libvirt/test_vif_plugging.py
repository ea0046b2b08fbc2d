"""Seed 001's experiment 1 for real: the L2 agent is the one who says a VIF is plugged."""

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
