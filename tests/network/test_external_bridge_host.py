"""What guests reach on the host's address on the external bridge: nothing new. The bridge as
``nefos up`` makes it (``external.ensure_external_bridge``, here under a name of the test's own), a
namespace on it playing a router's gateway (what guests come through): a service of the host
listening on every address does not answer it, nor does the host answer its ping; the host still
reaches it (its connections to floating IPs), and answers come back."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest

from nefos.control.network.external import ensure_external_bridge
from tests.network.l3_helpers import remove_host_input_chain
from tests.network.test_l3_agent import CONNECT, ECHO, sh


@pytest.fixture
def bridge_lab():
    tag = uuid.uuid4().hex[:6]
    octet = int(tag[:2], 16) % 200 + 20
    bridge, net, ns = f"brh{tag}", f"198.18.{octet}", f"nfxh-{tag}"
    yield {"bridge": bridge, "net": net, "ns": ns, "outer": f"hv{tag}"}
    subprocess.run(["ip", "link", "del", f"hv{tag}"], capture_output=True)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    remove_host_input_chain(bridge)


async def _reaches(ns: str | None, host: str, port: int) -> bool:
    argv = ([] if ns is None else ["ip", "netns", "exec", ns]) + [sys.executable, "-c", CONNECT, host, str(port)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await proc.wait() == 0


async def _pings(ns: str | None, host: str) -> bool:
    argv = ([] if ns is None else ["ip", "netns", "exec", ns]) + ["busybox", "ping", "-c", "1", "-W", "1", host]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await proc.wait() == 0


async def test_the_host_answers_nothing_new_from_its_external_bridge(bridge_lab):
    lab = bridge_lab
    bridge, net, ns = lab["bridge"], lab["net"], lab["ns"]
    await ensure_external_bridge(bridge, f"{net}.1/24")
    await ensure_external_bridge(bridge, f"{net}.1/24")  # idempotent: one jump, one chain
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", lab["outer"], "type", "veth", "peer", "name", "qg", "netns", ns)
    sh("ip", "link", "set", lab["outer"], "master", bridge, "up")
    sh("ip", "-n", ns, "addr", "add", f"{net}.20/24", "dev", "qg")
    for dev in ("lo", "qg"):
        sh("ip", "-n", ns, "link", "set", dev, "up")

    # A service of the host on every address, and one in the namespace.
    host_service = await asyncio.start_server(lambda r, w: w.close(), "0.0.0.0", 0)
    port = host_service.sockets[0].getsockname()[1]
    echo = await asyncio.create_subprocess_exec("ip", "netns", "exec", ns, sys.executable, "-c", ECHO, "7201",
                                                stdout=asyncio.subprocess.PIPE)
    try:
        assert (await asyncio.wait_for(echo.stdout.readline(), 10)).strip() == b"ready"
        async with host_service:
            assert await _reaches(None, f"{net}.1", port)  # the service is there
            # The host reaches the bridge's side, and the answers come back.
            assert await _reaches(None, f"{net}.20", 7201)
            assert await _pings(None, f"{net}.20")
            # From the bridge: nothing new reaches the host.
            assert not await _reaches(ns, f"{net}.1", port), "the host's service answered the external bridge"
            assert not await _pings(ns, f"{net}.1")
    finally:
        echo.kill()
        await echo.wait()
    saved = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True).stdout
    assert saved.count(f"-A INPUT -i {bridge} -j ") == 1, saved
