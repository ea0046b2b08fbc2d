"""Anti-spoofing and IPv6 on a real Linux bridge: a "guest" (a veth in a namespace, its bridge end
named like a guest's tap) sends forged frames; an observer on the same bridge sees none of them
while the port is protected, and sees them all when port security is off (so the observer and the
frames are proven to work). Forged: another MAC, another IPv4 source, an ARP reply for another
address, an IPv6 packet from another address, a router advertisement, a neighbour advertisement
for another address, a DHCP server reply."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from nefos.agents.firewall import Firewall, PortFilter
from tests.network import frames
from tests.network.wire import GUEST_IP, GUEST_MAC, OBSERVER_IP, OTHER_IP, OTHER_MAC, ROOT


def _port_filter(w) -> PortFilter:
    everything = {"direction": "egress", "protocol": None, "min": None, "max": None, "remotes": [None]}
    rules = [{**everything, "version": 4}, {**everything, "version": 6}]
    return PortFilter(w["port_id"], w["tap"], GUEST_MAC, [GUEST_IP], rules)


def _attacks(link_local: str) -> dict[str, bytes]:
    return {
        "spoofed MAC": frames.udp4(OTHER_MAC, GUEST_IP, OBSERVER_IP, b"NEFOS-SPOOF-MAC"),
        "spoofed IPv4 source": frames.udp4(GUEST_MAC, OTHER_IP, OBSERVER_IP, b"NEFOS-SPOOF-IP"),
        "forged ARP reply": frames.arp_reply(GUEST_MAC, GUEST_MAC, OTHER_IP, OBSERVER_IP),
        "ARP reply from 0.0.0.0": frames.arp_reply(GUEST_MAC, GUEST_MAC, "0.0.0.0", OBSERVER_IP),
        # the guest's own Ethernet header, another MAC as the ARP sender
        "ARP probe with another MAC inside": frames.arp_probe(GUEST_MAC, OBSERVER_IP)[:22]
        + frames.arp_probe(OTHER_MAC, OBSERVER_IP)[22:],
        "ARP with another MAC inside": frames.arp_reply(GUEST_MAC, OTHER_MAC, GUEST_IP, OBSERVER_IP),
        "spoofed IPv6 source": frames.neighbour_solicitation(GUEST_MAC, "fe80::1", "fe80::2"),
        "rogue router advertisement": frames.router_advertisement(GUEST_MAC, link_local),
        "forged neighbour advertisement": frames.neighbour_advertisement(GUEST_MAC, link_local, "fe80::1"),
        "DHCP server reply": frames.udp4(GUEST_MAC, GUEST_IP, "255.255.255.255", b"NEFOS-DHCP-OFFER",
                                         sport=67, dport=68),
    }


def _controls(link_local: str) -> dict[str, bytes]:
    return {
        "its own IPv4": frames.udp4(GUEST_MAC, GUEST_IP, OBSERVER_IP, b"NEFOS-OWN-IP"),
        "its own ARP": frames.arp_reply(GUEST_MAC, GUEST_MAC, GUEST_IP, OBSERVER_IP),
        "an ARP probe before it takes an address": frames.arp_probe(GUEST_MAC, GUEST_IP),
        "its own IPv6 neighbour solicitation": frames.neighbour_solicitation(GUEST_MAC, link_local, "fe80::2"),
        "its own neighbour advertisement": frames.neighbour_advertisement(GUEST_MAC, link_local, link_local),
    }


async def _exchange(w, sent: list[bytes]) -> set[bytes]:
    """Send ``sent`` (then the end marker) from the guest; what the observer received."""
    receiver = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", w["obs_ns"], sys.executable, "-m", "tests.network.frames", "recv", w["obs_dev"], "30",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    assert (await receiver.stdout.readline()).strip() == b"READY"
    end = frames.udp4(GUEST_MAC, GUEST_IP, OBSERVER_IP, frames.END)
    path = Path(f"/tmp/{w['key']}.json")
    path.write_text(json.dumps([f.hex() for f in sent + [end]]))
    try:
        sender = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", w["guest_ns"], sys.executable, "-m", "tests.network.frames", "send",
            w["guest_dev"], str(path), cwd=ROOT)
        assert await sender.wait() == 0
        out, _ = await receiver.communicate()
    finally:
        path.unlink(missing_ok=True)
    received = {bytes.fromhex(line) for line in out.decode().split() if line != "READY"}
    assert end in received, "the end marker never arrived: the observer saw nothing"
    return received


async def test_spoofed_frames_from_a_protected_port_are_dropped(wire):
    firewall = Firewall(wire["key"])
    pf = _port_filter(wire)
    attacks, controls = _attacks(pf.link_local), _controls(pf.link_local)
    try:
        await firewall.apply([pf])
        received = await _exchange(wire, list(attacks.values()) + list(controls.values()))
        passed = [name for name, frame in attacks.items() if frame in received]
        assert passed == [], f"forged frames got through: {passed}"
        missing = [name for name, frame in controls.items() if frame not in received]
        assert missing == [], f"a legitimate frame was dropped: {missing}"

        await firewall.apply([])  # port security off: nothing filtered
        received = await _exchange(wire, list(attacks.values()))
        missing = [name for name, frame in attacks.items() if frame not in received]
        assert missing == [], f"the observer cannot see {missing} even unfiltered: the test proves nothing"
    finally:
        await firewall.remove()


async def test_ipv6_security_group_rules_are_enforced(wire):
    """Egress IPv6 only where a rule allows it: with IPv4-only rules the guest's IPv6 (beyond the
    neighbour discovery IPv6 needs) goes nowhere; an IPv6 rule opens it."""
    firewall = Firewall(wire["key"])
    pf = _port_filter(wire)
    pf.rules = [r for r in pf.rules if r["version"] == 4]
    echo = frames.icmpv6(GUEST_MAC, pf.link_local, "fe80::2", 128, b"\0\1\0\1NEFOS-PING6", dst_mac=frames.BROADCAST)
    try:
        await firewall.apply([pf])
        assert echo not in await _exchange(wire, [echo])
        pf.rules.append({"direction": "egress", "protocol": "icmp", "min": None, "max": None,
                         "remotes": [None], "version": 6})
        await firewall.apply([pf])
        assert echo in await _exchange(wire, [echo])
    finally:
        await firewall.remove()


async def test_remove_leaves_no_chain(wire):
    firewall = Firewall(wire["key"])
    await firewall.apply([_port_filter(wire)])
    assert await firewall.existing_chains(4) and await firewall.existing_chains(6)
    assert await firewall._existing_l2_chains()
    await firewall.remove()
    assert not await firewall.existing_chains(4) and not await firewall.existing_chains(6)
    assert not await firewall._existing_l2_chains()


async def test_rewriting_the_rules_never_lets_a_spoofed_frame_through(wire):
    """The guest streams forged ARP replies while the agent rewrites the port's rules again and
    again (a security group change each time): the link-layer chains are replaced in one
    transaction, so not one frame passes in between."""
    firewall = Firewall(wire["key"])
    pf = _port_filter(wire)
    rule_sets = [pf.rules, pf.rules + [{"direction": "egress", "protocol": "tcp", "min": 22, "max": 22,
                                        "remotes": [None], "version": 4}]]
    # ARP: only the link-layer chains see it (IPv4 meets the IP chains' MAC check as well).
    spoofed = frames.arp_reply(GUEST_MAC, GUEST_MAC, OTHER_IP, OBSERVER_IP)
    end = frames.udp4(GUEST_MAC, GUEST_IP, OBSERVER_IP, frames.END)
    path, stop = Path(f"/tmp/{wire['key']}.json"), Path(f"/tmp/{wire['key']}.stop")
    path.write_text(json.dumps([spoofed.hex(), end.hex()]))
    receiver = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", wire["obs_ns"], sys.executable, "-m", "tests.network.frames", "recv",
        wire["obs_dev"], "60", cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    try:
        await firewall.apply([pf])
        assert (await receiver.stdout.readline()).strip() == b"READY"
        sender = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", wire["guest_ns"], sys.executable, "-m", "tests.network.frames", "stream",
            wire["guest_dev"], str(path), str(stop), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
        assert (await sender.stdout.readline()).strip() == b"SENDING"
        for i in range(30):
            pf.rules = rule_sets[(i + 1) % 2]
            assert await firewall.apply([pf])
        stop.touch()
        # And FORWARD still jumps to the agent's chains once (it gained one jump per rewrite).
        fwd = f"{firewall.prefix}-FWD"
        listing = subprocess.run(["ebtables", "-t", "filter", "-L", "FORWARD"], capture_output=True,
                                 text=True).stdout
        assert sum(line.split() == ["-j", fwd] for line in listing.splitlines()) == 1, listing
        for tool in ("iptables", "ip6tables"):
            rules = subprocess.run([tool, "-S", "FORWARD"], capture_output=True, text=True).stdout
            assert rules.count(f"-j {fwd}\n") == 1, rules
        counted, _ = await sender.communicate()
        assert sender.returncode == 0
        sent = int(counted.decode())
        out, _ = await receiver.communicate()
    finally:
        path.unlink(missing_ok=True)
        stop.unlink(missing_ok=True)
        if receiver.returncode is None:
            receiver.kill()
        await firewall.remove()
    received = [bytes.fromhex(line) for line in out.decode().split() if line != "READY"]
    assert end in received, "the end marker never arrived: the observer saw nothing"
    leaked = sum(1 for frame in received if frame == spoofed)
    assert sent >= 100, f"only {sent} forged frames were sent while the rules changed: the test proves nothing"
    assert leaked == 0, f"{leaked} spoofed frames passed while the rules were rewritten"
