"""A security group rule taken away also ends the connections it let in (Neutron deletes their
connection-tracking entries the same way): established traffic passes before any rule is read, so
without that a client already connected keeps its access. A change that keeps the rule leaves the
connection alone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from nefos.agents.firewall import Firewall, PortFilter, revoked_flows
from tests.network.wire import GUEST_IP, GUEST_MAC, OBSERVER_IP, ROOT

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen(); print("LISTENING", flush=True)
c, _ = s.accept()
while True:
    data = c.recv(100)
    if not data:
        break
    c.sendall(data.upper())
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 7000), timeout=10)
print("CONNECTED", flush=True)
for line in sys.stdin:
    c.sendall(line.strip().encode())
    c.settimeout(float(sys.argv[2]))
    try:
        print(c.recv(100).decode() or "CLOSED", flush=True)
    except (TimeoutError, socket.timeout):
        print("TIMEOUT", flush=True)
"""

# How long an answer may take before the connection counts as cut: on a bridge inside one machine
# an answer takes well under a millisecond.
NO_ANSWER_AFTER = "3"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def _bridged_traffic_through_iptables() -> None:
    if not Path("/proc/sys/net/bridge/bridge-nf-call-iptables").exists():
        subprocess.run(["modprobe", "br_netfilter"], check=True)
    for family in ("iptables", "ip6tables"):
        Path(f"/proc/sys/net/bridge/bridge-nf-call-{family}").write_text("1\n")


def _rule(direction: str, protocol: str | None = None, port: int | None = None, remote: str | None = None,
          version: int = 4) -> dict:
    return {"direction": direction, "protocol": protocol, "min": port, "max": port, "remotes": [remote],
            "version": version}


async def _ask(client, text: str) -> str:
    client.stdin.write(text.encode() + b"\n")
    await client.stdin.drain()
    return (await client.stdout.readline()).decode().strip()


async def test_removing_the_rule_ends_the_connection_it_allowed(wire):
    _bridged_traffic_through_iptables()
    _sh("ip", "-n", wire["guest_ns"], "addr", "add", f"{GUEST_IP}/24", "dev", wire["guest_dev"])
    _sh("ip", "-n", wire["obs_ns"], "addr", "add", f"{OBSERVER_IP}/24", "dev", wire["obs_dev"])
    firewall = Firewall(wire["key"])
    ssh_like = _rule("ingress", "tcp", 7000)
    pf = PortFilter(wire["port_id"], wire["tap"], GUEST_MAC, [GUEST_IP], [_rule("egress"), ssh_like])
    server = client = None
    try:
        await firewall.apply([pf])
        server = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", wire["guest_ns"], sys.executable, "-c", SERVER, GUEST_IP,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT)
        assert (await server.stdout.readline()).strip() == b"LISTENING"
        client = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", wire["obs_ns"], sys.executable, "-c", CLIENT, GUEST_IP, NO_ANSWER_AFTER,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT)
        assert (await client.stdout.readline()).strip() == b"CONNECTED"
        assert await _ask(client, "one") == "ONE"

        pf.rules = pf.rules + [_rule("ingress", "icmp")]  # a change that keeps the rule
        assert await firewall.apply([pf])
        assert await _ask(client, "two") == "TWO"

        pf.rules = [r for r in pf.rules if r is not ssh_like]
        assert await firewall.apply([pf])
        assert await _ask(client, "three") == "TIMEOUT"
    finally:
        for proc in (client, server):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
        await firewall.remove()


def test_the_flows_of_a_removed_rule_are_selected_as_narrowly_as_conntrack_can():
    before = PortFilter("p1", "tapp1", GUEST_MAC, [GUEST_IP, "2001:db8::5"], [
        _rule("ingress", "tcp", 22), _rule("ingress", "udp", None, "10.1.0.0/16"),
        {**_rule("ingress", "tcp"), "min": 8000, "max": 8080}, _rule("egress", "icmp", version=6),
        _rule("egress", "47")])
    after = PortFilter("p1", "tapp1", GUEST_MAC, [GUEST_IP, "2001:db8::5"], [])
    assert sorted(revoked_flows([before], [after])) == sorted([
        ["-D", "-f", "ipv4", "-d", GUEST_IP, "-p", "tcp", "--dport", "22"],
        ["-D", "-f", "ipv4", "-d", GUEST_IP, "-s", "10.1.0.0/16", "-p", "udp"],
        ["-D", "-f", "ipv4", "-d", GUEST_IP, "-p", "tcp"],  # a port range: the whole protocol
        ["-D", "-f", "ipv6", "-s", "2001:db8::5", "-p", "icmpv6"],
        ["-D", "-f", "ipv4", "-s", GUEST_IP],  # a protocol by number: every flow of the address
    ])
    assert revoked_flows([before], [before]) == []
    assert revoked_flows([before], []) == []  # the port itself went: its flows go with it


@pytest.fixture(autouse=True)
def _conntrack_installed():
    assert subprocess.run(["conntrack", "--version"], capture_output=True).returncode == 0
