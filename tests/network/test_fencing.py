"""A guest whose port is gone is cut off at once: when a server is deleted while its host is down,
the API deletes it and its port, but the guest may keep running with its tap wired and its
address about to be someone else's. The host's L2 agent unplugs such a tap and drops everything
to and from it; taps that are not this cloud's are left alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

from nefos.context import RequestContext
from nefos.agents.l2_agent import _master
from tests.network import frames
from tests.network.wire import GUEST_IP, GUEST_MAC, OBSERVER_IP, ROOT, sh

HOST = "fence-host"


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def _received(obs_ns: str, obs_dev: str, sent: bytes, guest_ns: str, guest_dev: str) -> bool:
    """Whether the observer sees ``sent`` from the guest (waiting 2 s at most for it)."""
    receiver = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", obs_ns, sys.executable, "-m", "tests.network.frames", "recv", obs_dev, "2",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    assert (await receiver.stdout.readline()).strip() == b"READY"
    path = Path(f"/tmp/fence-{uuid.uuid4().hex}.json")
    path.write_text(json.dumps([sent.hex()]))
    try:
        sender = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", guest_ns, sys.executable, "-m", "tests.network.frames", "send", guest_dev,
            str(path), cwd=ROOT)
        assert await sender.wait() == 0
        out, _ = await receiver.communicate()
    finally:
        path.unlink(missing_ok=True)
    return sent.hex() in out.decode().split()


async def test_a_tap_whose_port_is_deleted_is_unplugged_and_fenced(rt, manager, agent):
    ctx = RequestContext(project_id="f" * 32, user_id="u" * 32, roles=["admin", "member", "reader"], is_admin=True)
    group = await manager.create_security_group(ctx, {"name": "fence"})  # egress open, as Neutron's
    net = await manager.create_network(ctx, {"name": "fence"})
    await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.77.0.0/24", "ip_version": 4})
    port = await manager.create_port(ctx, {"network_id": net["id"], "device_owner": "compute:nova",
                                           "device_id": str(uuid.uuid4()), "mac_address": GUEST_MAC,
                                           "binding:host_id": HOST, "security_groups": [group["id"]],
                                           "fixed_ips": [{"ip_address": GUEST_IP}]})
    tag = uuid.uuid4().hex[:6]
    tap, bridge = "tap" + port["id"][:11], "brq" + net["id"][:11]
    guest_ns, obs_ns, obs = f"nffe-g-{tag}", f"nffe-o-{tag}", f"obs{tag}"
    links = [tap, obs]
    try:
        for ns in (guest_ns, obs_ns):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", tap, "type", "veth", "peer", "name", "g" + tag)
        sh("ip", "link", "set", "g" + tag, "netns", guest_ns)
        sh("ip", "-n", guest_ns, "link", "set", "g" + tag, "address", GUEST_MAC)
        sh("ip", "-n", guest_ns, "link", "set", "g" + tag, "up")
        sh("ip", "link", "set", tap, "up")
        await _until(lambda: _master(tap) == bridge)  # the agent wired it into its network's bridge
        sh("ip", "link", "add", obs, "type", "veth", "peer", "name", "o" + tag)
        sh("ip", "link", "set", obs, "master", bridge)
        sh("ip", "link", "set", obs, "up")
        sh("ip", "link", "set", "o" + tag, "netns", obs_ns)
        sh("ip", "-n", obs_ns, "link", "set", "o" + tag, "up")
        own = frames.udp4(GUEST_MAC, GUEST_IP, OBSERVER_IP, b"NEFOS-FENCE")
        assert await _received(obs_ns, "o" + tag, own, guest_ns, "g" + tag)  # wired and allowed

        # A port of the network's DHCP server, its tap in the same bridge: bound to no guest, but
        # its port exists, so it is not fenced (this cut every guest's DHCP off once).
        dhcp = await manager.create_port(ctx, {"network_id": net["id"], "device_owner": "network:dhcp",
                                               "device_id": "dhcp-fence"})
        dhcp_tap = "tap" + dhcp["id"][:11]
        links.append(dhcp_tap)
        sh("ip", "link", "add", dhcp_tap, "type", "veth", "peer", "name", "d" + tag)
        sh("ip", "link", "set", dhcp_tap, "master", bridge)
        await manager.delete_port(ctx, port["id"])  # the server was deleted while its host was down
        await _until(lambda: _master(tap) is None)
        assert _master(dhcp_tap) == bridge
        assert not await _received(obs_ns, "o" + tag, own, guest_ns, "g" + tag)
        saved = subprocess.run(["ebtables-save"], capture_output=True, text=True).stdout
        assert f"-i {tap} -j DROP" in saved and f"-o {tap} -j DROP" in saved, saved
        assert dhcp_tap not in saved, saved
    finally:
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in (guest_ns, obs_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


async def test_taps_of_other_clouds_are_left_alone(rt, network, agent):
    """A tap on no bridge of this cloud and never wired by this agent is not its business."""
    tap = "tap" + uuid.uuid4().hex[:11]
    sh("ip", "link", "add", tap, "type", "veth", "peer", "name", "x" + tap[3:14])
    try:
        await agent.sync_security_groups()
        saved = subprocess.run(["ebtables-save"], capture_output=True, text=True).stdout
        assert tap not in saved
    finally:
        subprocess.run(["ip", "link", "del", tap], capture_output=True)
