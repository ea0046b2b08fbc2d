"""A real guest whose port is taken down (``admin_state_up`` false) is cut off: the host's L2 agent
sets its tap down, so no frame reaches it (it stops answering a neighbour's ping) and none of its
own frames reaches the network (an observer on the network's bridge sees nothing from its MAC), and
the port shows DOWN. Set true again: the port goes ACTIVE and the guest answers again. The cloud runs
at its shipped defaults (the L2 agent acts on the network service's ``port_update``)."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from pathlib import Path

import pytest

from tests.libvirt.conftest import (
    _ping_once, allow_icmp, make_network, ping_from_dhcp_namespace, wait_console,
)

pytestmark = pytest.mark.libvirt

ROOT = Path(__file__).resolve().parents[2]
BOUND = 30.0  # seconds a change may take to reach the guest's tap


def _chatter(target: str) -> str:
    """User data: the guest keeps sending (ARP, ICMP) toward ``target``, in the background."""
    return ("#!/bin/sh\n"
            f"( while :; do ping -c 1 -W 1 {target} >/dev/null 2>&1; usleep 200000; done ) &\n")


async def _frames_from(ns: str, mac: str, seconds: float) -> int:
    """How many frames with source ``mac`` the namespace's DHCP interface receives in ``seconds``."""
    _, out = await _run("ip", "-n", ns, "-o", "link", "show")
    (dev,) = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ": ns-" in line]
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, sys.executable, "-m", "tests.network.frames", "recv", dev, str(seconds),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    out_bytes, _ = await proc.communicate()
    source = mac.replace(":", "").lower()
    return sum(1 for line in out_bytes.decode().split()[1:] if line[12:24] == source)


async def _run(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode, out.decode(errors="replace")


async def _port(cloud, port_id: str) -> dict:
    r = await cloud.network.get(f"/v2.0/ports/{port_id}")
    assert r.status_code == 200, r.text
    return r.json()["port"]


async def _until(what: str, predicate, timeout: float = BOUND) -> float:
    """Seconds until ``await predicate()`` holds (at most ``timeout``)."""
    t0 = time.monotonic()
    while not await predicate():
        assert time.monotonic() - t0 < timeout, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


def _link_up(dev: str) -> bool:
    return bool(int(Path(f"/sys/class/net/{dev}/flags").read_text(), 16) & 1)


async def test_a_guest_whose_port_is_taken_down_is_cut_off_until_it_is_up_again(lvcloud):
    cloud = lvcloud
    net = await make_network(cloud, name="down-net", cidr="10.81.0.0/24")
    [dhcp] = await cloud.ports(network_id=net["id"], device_owner="network:dhcp")
    dhcp_ip = dhcp["fixed_ips"][0]["ip_address"]
    user_data = base64.b64encode(_chatter(dhcp_ip).encode()).decode()
    sid = (await cloud.boot(name="cut-off", flavor="42", networks=[{"uuid": net["id"]}], config_drive=True,
                            user_data=user_data))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    (port,) = await cloud.ports(device_id=sid)
    ip, mac, tap = port["fixed_ips"][0]["ip_address"], port["mac_address"], "tap" + port["id"][:11]
    await wait_console(cloud, sid, "user-data=ran", timeout=120)
    await allow_icmp(cloud, port)
    ns = cloud.dhcp.namespace_of(net["id"])
    await ping_from_dhcp_namespace(cloud, net["id"], ip)
    assert await _frames_from(ns, mac, 3) > 0  # the guest's chatter reaches the network

    # The operator takes the port down: 200, then DOWN, the tap down, no answer, no frame.
    t0 = time.monotonic()
    r = await cloud.network.put(f"/v2.0/ports/{port['id']}", json={"port": {"admin_state_up": False}})
    assert r.status_code == 200, r.text
    assert r.json()["port"]["admin_state_up"] is False
    await _until("port DOWN", lambda: _status_is(cloud, port["id"], "DOWN"))
    down_after = time.monotonic() - t0
    await _until("tap down", lambda: _async(not _link_up(tap)))
    silent_after = time.monotonic() - t0 + await _until("ping fails", lambda: _ping_fails(ns, ip))
    assert await _frames_from(ns, mac, 5) == 0
    for _ in range(3):
        assert await _ping_fails(ns, ip)
    assert (await cloud.server(sid))["status"] == "ACTIVE"  # the guest runs on, cut off
    assert os.path.exists(f"/sys/class/net/{tap}")

    # Up again: ACTIVE, answering, its frames on the network again.
    t1 = time.monotonic()
    r = await cloud.network.put(f"/v2.0/ports/{port['id']}", json={"port": {"admin_state_up": True}})
    assert r.status_code == 200, r.text
    await _until("port ACTIVE", lambda: _status_is(cloud, port["id"], "ACTIVE"))
    active_after = time.monotonic() - t1
    answering_after = time.monotonic() - t1 + await ping_from_dhcp_namespace(cloud, net["id"], ip, timeout=BOUND)
    assert _link_up(tap)
    assert await _frames_from(ns, mac, 3) > 0
    print(f"\nadmin_state_up false: port DOWN after {down_after:.2f} s, no answer after {silent_after:.2f} s; "
          f"true: ACTIVE after {active_after:.2f} s, answering after {answering_after:.2f} s")


async def _async(value):
    return value


async def _status_is(cloud, port_id: str, status: str) -> bool:
    return (await _port(cloud, port_id))["status"] == status


async def _ping_fails(ns: str, ip: str) -> bool:
    rc, _ = await _ping_once(ns, ip)
    return rc != 0
