"""Provisioning blocks on the real dataplane: a port on a DHCP network goes ACTIVE only when the
L2 agent saw its tap on the bridge (netlink) AND the DHCP agent's dnsmasq re-read a hosts file
holding its entry; on a network without DHCP the L2 agent's word is enough.

No guest here: the tap is made with ``ip tuntap`` and enslaved to the network's bridge, which is
exactly what the L2 agent watches for (libvirt does the same for a guest)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from types import SimpleNamespace

import pytest

from nefos.agents.dhcp_agent import DhcpAgent
from nefos.agents.l2_agent import L2Agent
from nefos.host.virt.libvirt.vif import ensure_bridge
from tests.clouds import ADMIN, start_cloud, stop_cloud

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


def _plug(tap: str, bridge: str) -> None:
    """A tap on the bridge, as libvirt + the L2 agent leave a guest's."""
    _ip("tuntap", "add", "dev", tap, "mode", "tap")
    _ip("link", "set", tap, "master", bridge)
    _ip("link", "set", tap, "up")


@contextlib.asynccontextmanager
async def _cloud_with_agents(tmp_path, dhcp_interval: float):
    """A cloud, the L2 agent and the DHCP agent of HOST (``env.dhcp`` may be replaced); the taps
    and bridges put in ``env.taps`` / ``env.bridges`` are deleted at the end."""
    env = SimpleNamespace(cloud=await start_cloud(tmp_path, fake_hosts=0), taps=[], bridges=[])
    env.l2 = L2Agent(env.cloud.rt, HOST)
    env.dhcp = DhcpAgent(env.cloud.rt, HOST, interval=dhcp_interval)
    try:
        await env.l2.start()
        await env.dhcp.start()  # alive: new ports on DHCP networks wait for it
        yield env
    finally:
        await env.dhcp.stop()
        await env.l2.stop()
        await env.l2.remove_firewall()
        await stop_cloud(env.cloud)
        for dev in env.taps + env.bridges:
            subprocess.run(["ip", "link", "del", dev], capture_output=True)


async def _network(cloud, name: str, cidr: str, dhcp: bool) -> dict:
    r = await cloud.network.post("/v2.0/networks", json={"network": {"name": name}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    net = r.json()["network"]
    r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": net["id"], "cidr": cidr, "ip_version": 4, "enable_dhcp": dhcp}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return net


async def test_active_waits_for_the_dhcp_agent_on_a_dhcp_network(tmp_path):
    async with _cloud_with_agents(tmp_path, 0.2) as env:
        cloud, dhcp, taps, bridges = env.cloud, env.dhcp, env.taps, env.bridges
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
            taps.append(tap)
            _plug(tap, "brq" + n["id"][:11])

        # The L2 agent saw both taps: the plain port goes ACTIVE, the DHCP one stays BUILD.
        await _until(cloud, plain_port["id"], lambda p: p["status"] == "ACTIVE")
        seen = await _until(cloud, port["id"], lambda p: p["nefos:provisioning"].get("L2") == "satisfied")
        assert seen["status"] == "BUILD" and seen["nefos:provisioning"]["DHCP"] == "pending"
        await asyncio.sleep(1.5)
        still = await _get(cloud, port["id"])
        assert still["status"] == "BUILD", still  # nobody confirmed its DHCP entry

        # The DHCP agent back: dnsmasq re-reads a hosts file with the entry, the agent says so.
        dhcp = env.dhcp = DhcpAgent(cloud.rt, HOST, interval=0.2)
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


async def test_the_dhcp_agent_acts_on_the_network_services_notifications(tmp_path):
    """Port created / deleted -> the network service fans out ``network_changed`` on
    ``dhcp_agent`` -> the agent syncs that network at once: with its periodic sync an hour away,
    the port's DHCP acknowledgement (and so ACTIVE) comes well within a second."""
    async with _cloud_with_agents(tmp_path, 3600) as env:
        cloud, dhcp, taps, bridges = env.cloud, env.dhcp, env.taps, env.bridges
        await asyncio.wait_for(dhcp.synced.wait(), 10)  # the start's full sync (no network yet)
        assert dhcp.full_syncs == 1
        net = await _network(cloud, "prov-notified", "10.83.0.0/24", dhcp=True)
        bridges.append("brq" + net["id"][:11])
        deadline = time.monotonic() + 10
        while net["id"] not in dhcp._applied:  # subnet_create_end: dnsmasq started for it
            assert time.monotonic() < deadline, "the DHCP agent never set the new network up"
            await asyncio.sleep(0.02)
        host_file = dhcp.state_dir / net["id"] / "host"

        t0 = time.monotonic()
        port = await _port(cloud, net["id"])
        acked = await _until(cloud, port["id"], lambda p: p["nefos:provisioning"].get("DHCP") == "satisfied",
                             timeout=5)
        took = time.monotonic() - t0
        assert took < 0.8, f"DHCP acknowledged {took:.2f} s after the port's creation"
        assert acked["status"] == "DOWN"  # no device yet: L2 still pending
        ip = port["fixed_ips"][0]["ip_address"]
        assert f"{port['mac_address']},host-{ip.replace('.', '-')},{ip}" in host_file.read_text()
        print(f"\nport created -> DHCP acknowledged in {took:.3f} s (periodic sync every 3600 s)")

        # The tap on the bridge: L2 too -> ACTIVE.
        tap = "tap" + port["id"][:11]
        taps.append(tap)
        _plug(tap, "brq" + net["id"][:11])
        await _until(cloud, port["id"], lambda p: p["status"] == "ACTIVE", timeout=5)

        # Deleted: its entry leaves the hosts file at once too (port_delete_end).
        _ip("link", "del", tap)
        taps.remove(tap)
        r = await cloud.network.delete(f"/v2.0/ports/{port['id']}", headers=ADMIN)
        assert r.status_code == 204, r.text
        deadline = time.monotonic() + 2
        while port["mac_address"] in host_file.read_text():
            assert time.monotonic() < deadline, "the deleted port's entry stayed"
            await asyncio.sleep(0.02)
        assert dhcp.full_syncs == 1  # all of it on notifications, none on the periodic sync
