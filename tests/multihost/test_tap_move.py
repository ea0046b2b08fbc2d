"""The libvirt driver's ``libvirtd_netns`` hook: a tap made in one network namespace and moved by
``tap_netns.move_taps_here`` into the compute host's namespace keeps working for the process that
holds its file descriptor (QEMU in the harness), as the multi-host harness relies on."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import uuid

from nefos.host.virt.libvirt import config as vconfig
from tests.multihost.underlay import run

TUNSETIFF, IFF_TAP, IFF_NO_PI = 0x400454CA, 0x0002, 0x1000


def _rx_packets(ns: str, dev: str) -> int:
    out = run("ip", "-n", ns, "-s", "-j", "link", "show", dev).stdout
    return json.loads(out)[0]["stats64"]["rx"]["packets"]


def test_a_moved_tap_keeps_carrying_frames_from_its_holder():
    token = uuid.uuid4().hex[:6]
    ns, tap = f"mhtap-{token}", f"tapmh{token}"
    run("ip", "netns", "add", ns)
    fd = os.open("/dev/net/tun", os.O_RDWR)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", tap.encode(), IFF_TAP | IFF_NO_PI))
        # The compute host's side: move_taps_here run in the namespace, from this (the root) one.
        code = ("import asyncio, sys; from nefos.host.virt.libvirt.tap_netns import move_taps_here; "
                "asyncio.run(move_taps_here([sys.argv[1]], sys.argv[2]))")
        moved = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code, tap,
                                f"/proc/{os.getpid()}/ns/net"], capture_output=True, text=True, timeout=60)
        assert moved.returncode == 0, moved.stderr
        assert not os.path.exists(f"/sys/class/net/{tap}")
        run("ip", "-n", ns, "link", "set", tap, "up")
        before = _rx_packets(ns, tap)
        frame = b"\xff" * 6 + bytes.fromhex("02aabbccddee") + b"\x88\xb5" + b"nefos" * 10  # local ethertype
        os.write(fd, frame)
        assert _rx_packets(ns, tap) == before + 1
        # Moved again (a second start of the same guest finds it here already): no error.
        again = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code, tap,
                                f"/proc/{os.getpid()}/ns/net"], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
    finally:
        os.close(fd)
        run("ip", "netns", "del", ns, check=False)


def test_a_tap_that_is_nowhere_fails_the_move():
    code = ("import asyncio, sys; from nefos.host.virt.libvirt.tap_netns import move_taps_here; "
            "asyncio.run(move_taps_here(['tapmhnowhere'], '/proc/1/ns/net'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cannot move tap tapmhnowhere" in r.stderr, r.stderr


def test_ethernet_taps_of_a_domain():
    xml = """<domain><devices>
      <interface type='ethernet'><mac address='fa:16:3e:00:00:01'/><target dev='tapaaaaaaaaaaa'/></interface>
      <interface type='bridge'><source bridge='br0'/><target dev='vnet0'/></interface>
      <interface type='ethernet'><target dev='tapbbbbbbbbbbb'/></interface>
    </devices></domain>"""
    assert vconfig.ethernet_taps(xml) == ["tapaaaaaaaaaaa", "tapbbbbbbbbbbb"]
    assert vconfig.ethernet_taps("not xml") == []
