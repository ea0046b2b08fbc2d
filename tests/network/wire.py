"""A small bridged wire for the firewall tests: a bridge with a "guest" (a veth whose bridge end is
named like a guest's tap, the other end in a namespace of its own) and an observer (likewise)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUEST_MAC, GUEST_IP = "fa:16:3e:12:34:56", "10.77.0.5"
OTHER_MAC, OTHER_IP = "fa:16:3e:65:43:21", "10.77.0.9"
OBSERVER_IP = "10.77.0.2"


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def wire():
    """bridge <- tap<port> (guest end in netns G), obs<x> (observer end in netns O)."""
    tag = uuid.uuid4().hex[:6]
    port_id = f"{tag}00-0000-4000-8000-000000000001"
    bridge, tap, obs = f"brqas{tag}", "tap" + port_id[:11], f"obs{tag}"
    guest_ns, obs_ns = f"nfas-g-{tag}", f"nfas-o-{tag}"
    for ns in (guest_ns, obs_ns):
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", bridge, "type", "bridge")
    sh("ip", "link", "set", bridge, "up")
    sh("ip", "link", "add", tap, "type", "veth", "peer", "name", "g" + tag)
    sh("ip", "link", "add", obs, "type", "veth", "peer", "name", "o" + tag)
    for end in (tap, obs):
        sh("ip", "link", "set", end, "master", bridge)
        sh("ip", "link", "set", end, "up")
    sh("ip", "link", "set", "g" + tag, "netns", guest_ns)
    sh("ip", "link", "set", "o" + tag, "netns", obs_ns)
    sh("ip", "-n", guest_ns, "link", "set", "g" + tag, "address", GUEST_MAC)
    for ns, dev in ((guest_ns, "g" + tag), (obs_ns, "o" + tag)):
        sh("ip", "-n", ns, "link", "set", dev, "up")
    yield {"port_id": port_id, "tap": tap, "guest_ns": guest_ns, "obs_ns": obs_ns,
           "guest_dev": "g" + tag, "obs_dev": "o" + tag, "key": f"antispoof-{tag}"}
    for link in (tap, obs, bridge):
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    for ns in (guest_ns, obs_ns):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


