"""A router's namespace forwards nothing toward the host's uplink, even on a host that forwards
(``ip_forward = 1``, as Docker and libvirt hosts do): on its gateway a router exchanges traffic
only with the external network's own subnet. Built on namespaces this test makes: a namespace
plays the host (the external subnet's gateway address on the external bridge, forwarding on, an
"uplink" to a namespace playing the outside world, which routes the external subnet back through
it). A guest behind the router reaches the external subnet, but neither the outside world nor
the host's other addresses; the outside world does not reach the guest's floating IP."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from nefos.agents.l3_agent import L3Agent
from nefos.agents.router_ns import namespace
from tests.network.conftest import Helpers, member
from tests.network.l3_helpers import external_network, put, router, tenant_network
from tests.network.test_l3_agent import CONNECT, ECHO, guest, sh

OUTSIDE_NET = "198.51.100"  # the host's "uplink" network (TEST-NET-2), between two test namespaces


@pytest.fixture
def uplink_lab():
    """external bridge (root namespace, no address) <- veth -> netns H (the "host": <ext>.1/24,
    ip_forward=1) <- veth "uplink" -> netns W (the outside world: 198.51.100.2, routing the external
    subnet back via H)."""
    assert os.geteuid() == 0 and shutil.which("nft"), "needs root and nft (scripts/install-test-deps.sh)"
    tag = uuid.uuid4().hex[:6]
    octet = int(tag[:2], 16) % 200 + 20
    ext_bridge, ext_net = f"brx{tag}", f"198.18.{octet}"
    host_ns, world_ns = f"nfup-h-{tag}", f"nfup-w-{tag}"
    made = {"netns": [host_ns, world_ns], "links": [ext_bridge, f"hx{tag}"]}
    for ns in (host_ns, world_ns):
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", ext_bridge, "type", "bridge")
    sh("ip", "link", "set", ext_bridge, "up")
    sh("ip", "link", "add", f"hx{tag}", "type", "veth", "peer", "name", "br0", "netns", host_ns)
    sh("ip", "link", "set", f"hx{tag}", "master", ext_bridge, "up")
    sh("ip", "-n", host_ns, "link", "add", "up0", "type", "veth", "peer", "name", "up0", "netns", world_ns)
    sh("ip", "-n", host_ns, "addr", "add", f"{ext_net}.1/24", "dev", "br0")
    sh("ip", "-n", host_ns, "addr", "add", f"{OUTSIDE_NET}.1/24", "dev", "up0")
    sh("ip", "-n", world_ns, "addr", "add", f"{OUTSIDE_NET}.2/24", "dev", "up0")
    for ns, devs in ((host_ns, ("lo", "br0", "up0")), (world_ns, ("lo", "up0"))):
        for dev in devs:
            sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "netns", "exec", host_ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    sh("ip", "-n", world_ns, "route", "add", f"{ext_net}.0/24", "via", f"{OUTSIDE_NET}.1")
    yield {"tag": tag, "ext_bridge": ext_bridge, "ext_net": ext_net, "host_ns": host_ns, "world_ns": world_ns,
           "made": made}
    for link in made["links"]:
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    for ns in made["netns"]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


async def _listen(ns: str, port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec("ip", "netns", "exec", ns, sys.executable, "-c", ECHO, str(port),
                                                stdout=asyncio.subprocess.PIPE)
    assert (await asyncio.wait_for(proc.stdout.readline(), 10)).strip() == b"ready"
    return proc


async def _reaches(ns: str, host: str, port: int) -> bool:
    proc = await asyncio.create_subprocess_exec("ip", "netns", "exec", ns, sys.executable, "-c", CONNECT, host,
                                                str(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await proc.wait() == 0


async def test_a_router_forwards_nothing_toward_the_host_s_uplink_on_a_forwarding_host(rt, network, client,
                                                                                          uplink_lab):
    lab = uplink_lab
    h = Helpers(client)
    ext_net = lab["ext_net"]
    ext, _ = await external_network(h, f"{ext_net}.0/24")
    net, sub = await tenant_network(h, "10.62.0.0/24")
    bridge = "brq" + net["id"][:11]
    lab["made"]["links"].append(bridge)
    port = await h.port(net["id"], headers=member())
    r = await router(h, external_gateway_info={"network_id": ext["id"]})
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    fip = (await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"],
                                                             "port_id": port["id"]}},
                        member()))["floatingip"]["floating_ip_address"]

    agent = L3Agent(rt, host="l3-uplink", interval=3600, external_bridge=lab["ext_bridge"])
    await agent.start()
    lab["made"]["netns"].append(namespace(r["id"]))
    listeners = []
    try:
        await agent.wait_for(lambda: agent.applied.get(r["id"], {}).get("floating_ips"))
        g = guest(lab, "g", bridge, port, 24, sub["gateway_ip"])
        listeners += [await _listen(lab["host_ns"], 7101), await _listen(lab["world_ns"], 7102),
                      await _listen(g, 7103)]
        # The external subnet is reachable: the host's address on the external bridge.
        assert await _reaches(g, f"{ext_net}.1", 7101)
        # Beyond it, nothing: the outside world behind the host's uplink, the host's uplink address.
        assert not await _reaches(g, f"{OUTSIDE_NET}.2", 7102), "the router forwarded toward the uplink"
        assert not await _reaches(g, f"{OUTSIDE_NET}.1", 7101), "the router reached the host's other address"
        # Nor does the outside world reach the guest through the host and the floating IP; the host does.
        assert not await _reaches(lab["world_ns"], fip, 7103), "the uplink reached a floating IP"
        assert await _reaches(lab["host_ns"], fip, 7103)
    finally:
        for proc in listeners:
            proc.kill()
            await proc.wait()
        await agent.stop()
