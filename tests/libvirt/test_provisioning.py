"""Provisioning blocks on the real dataplane: a port on a DHCP network goes ACTIVE only when the
L2 agent saw its tap on the bridge (netlink) AND the DHCP agent's dnsmasq re-read a hosts file
holding its entry; on a network without DHCP the L2 agent's word is enough.

No guest here: the tap is made with ``ip tuntap`` and enslaved to the network's bridge, which is
exactly what the L2 agent watches for (libvirt does the same for a guest)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest

from nefos.network.dhcp_agent import DhcpAgent
from nefos.network.l2_agent import L2Agent
from nefos.virt.libvirt.vif import ensure_bridge
from tests.pipeline.conftest import ADMIN, start_cloud, stop_cloud

pytestmark = pytest.mark.libvirt

HOST = "prov-1"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


async def _port(cloud, network_id: str) -> dict:
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": network_id, "device_id": str(uuid.uuid4()), "device_owner": "compute:nova",
        "binding:host_id": HOST}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()["port"]


async def _get(cloud, port_id: str) -> dict:
    r = await cloud.network.get(f"/v2.0/ports/{port_id}", headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()["port"]


async def _until(cloud, port_id: str, check, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        port = await _get(cloud, port_id)
        if check(port):
            return port
        assert time.monotonic() < deadline, f"port {port_id} never got there: {port}"
        await asyncio.sleep(0.05)


async def _network(cloud, name: str, cidr: str, dhcp: bool) -> dict:
    r = await cloud.network.post("/v2.0/networks", json={"network": {"name": name}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    net = r.json()["network"]
    r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": net["id"], "cidr": cidr, "ip_version": 4, "enable_dhcp": dhcp}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return net


async def test_active_waits_for_the_dhcp_agent_on_a_dhcp_network(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=0)
    l2 = L2Agent(cloud.rt, HOST)
    dhcp = DhcpAgent(cloud.rt, HOST, interval=0.2)
    taps, bridges = [], []
    try:
        await l2.start()
        await dhcp.start()  # alive: new ports on DHCP networks wait for it
        net = await _network(cloud, "prov-dhcp", "10.81.0.0/24", dhcp=True)
        plain = await _network(cloud, "prov-plain", "10.82.0.0/24", dhcp=False)
        bridges += ["brq" + net["id"][:11], "brq" + plain["id"][:11]]
        for n in (net, plain):
            await ensure_bridge("brq" + n["id"][:11])
        dhcp.synced.clear()
        await asyncio.wait_for(dhcp.synced.wait(), 10)
        await dhcp.stop()  # the DHCP agent stops acknowledging (its heartbeat is still recent)

        port = await _port(cloud, net["id"])
        plain_port = await _port(cloud, plain["id"])
        assert port["nefos:provisioning"] == {"L2": "pending", "DHCP": "pending"}
        assert plain_port["nefos:provisioning"] == {"L2": "pending"}  # no DHCP on that network

        for p, n in ((port, net), (plain_port, plain)):
            tap = "tap" + p["id"][:11]
            _ip("tuntap", "add", "dev", tap, "mode", "tap")
            taps.append(tap)
            _ip("link", "set", tap, "master", "brq" + n["id"][:11])
            _ip("link", "set", tap, "up")

        # The L2 agent saw both taps: the plain port goes ACTIVE, the DHCP one stays BUILD.
        await _until(cloud, plain_port["id"], lambda p: p["status"] == "ACTIVE")
        seen = await _until(cloud, port["id"], lambda p: p["nefos:provisioning"].get("L2") == "satisfied")
        assert seen["status"] == "BUILD" and seen["nefos:provisioning"]["DHCP"] == "pending"
        await asyncio.sleep(1.5)
        still = await _get(cloud, port["id"])
        assert still["status"] == "BUILD", still  # nobody confirmed its DHCP entry

        # The DHCP agent back: dnsmasq re-reads a hosts file with the entry, the agent says so.
        dhcp = DhcpAgent(cloud.rt, HOST, interval=0.2)
        t0 = time.monotonic()
        await dhcp.start()
        active = await _until(cloud, port["id"], lambda p: p["status"] == "ACTIVE", timeout=15)
        took = time.monotonic() - t0
        assert active["nefos:provisioning"] == {"L2": "satisfied", "DHCP": "satisfied"}
        hosts = (dhcp.state_dir / net["id"] / "host").read_text()
        ip = port["fixed_ips"][0]["ip_address"]
        assert f"{port['mac_address']},host-{ip.replace('.', '-')},{ip}" in hosts
        assert f"read {dhcp.state_dir / net['id'] / 'host'}" in (dhcp.state_dir / net["id"] / "dnsmasq.log").read_text()
        print(f"\nDHCP agent started -> port ACTIVE in {took:.2f} s")

        # A member sees no provisioning details; an admin does.
        r = await cloud.network.get(f"/v2.0/ports/{port['id']}", headers={
            "X-Project-Id": port["project_id"], "X-Roles": "member,reader"})
        assert r.status_code == 200, r.text
        assert "nefos:provisioning" not in r.json()["port"]

        # The device gone: DOWN and blocked on L2 again; back: ACTIVE (DHCP still satisfied).
        tap = "tap" + port["id"][:11]
        _ip("link", "del", tap)
        taps.remove(tap)
        down = await _until(cloud, port["id"], lambda p: p["status"] == "DOWN")
        assert down["nefos:provisioning"] == {"L2": "pending", "DHCP": "satisfied"}
    finally:
        await dhcp.stop()
        await l2.stop()
        await l2.remove_firewall()
        await stop_cloud(cloud)
        for dev in taps + bridges:
            subprocess.run(["ip", "link", "del", dev], capture_output=True)
