"""Anti-spoofing seen from a real guest: a variant of the tiny guest, once its NIC is up, sends
raw frames: its own (a control) and forged ones (another source MAC, another IPv4 source, an ARP
reply for another address, both for its subnet's gateway address, a packet from another IPv6 address, a rogue IPv6 router advertisement,
a neighbour advertisement for another address, a DHCP server reply). An observer on the network's bridge sees none of the forged frames from a
port with port security, and all of them from a port without it (so the test can fail)."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nefos.context import RequestContext
from nefos.control.image import images
from nefos.guest.build import build_initramfs, find_kernel
from tests.libvirt.conftest import make_network, wait_console
from tests.network import frames
from tests.noauth import ADMIN

pytestmark = pytest.mark.libvirt

ROOT = Path(__file__).resolve().parents[2]
SENDER_C = r"""
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
/* sendframes IFACE FILE: FILE holds frames, each a 2-byte big-endian length and its bytes. */
int main(int argc, char **argv) {
    int s = socket(AF_PACKET, SOCK_RAW, htons(0x0003));
    struct sockaddr_ll to; memset(&to, 0, sizeof to);
    to.sll_family = AF_PACKET; to.sll_ifindex = if_nametoindex(argv[1]); to.sll_halen = 6;
    FILE *f = fopen(argv[2], "rb");
    unsigned char len[2], buf[2048]; int n = 0;
    if (s < 0 || !f || !to.sll_ifindex) { perror("sendframes"); return 1; }
    while (fread(len, 1, 2, f) == 2) {
        size_t size = (len[0] << 8) | len[1];
        if (size > sizeof buf || fread(buf, 1, size, f) != size) return 2;
        if (sendto(s, buf, size, 0, (struct sockaddr *)&to, sizeof to) < 0) { perror("sendto"); return 3; }
        n++;
    }
    printf("NEFOS-ATTACK: %d frames sent\n", n);
    return 0;
}
"""
AFTER_BOOT = """#!/bin/sh
until ip -4 addr show eth0 | grep -q inet; do usleep 200000; done
/bin/sendframes eth0 /etc/frames.bin > /dev/console 2>&1
"""
OTHER_MAC, OTHER_IP = "fa:16:3e:65:43:21", "10.79.0.250"
GATEWAY_IP = "10.79.0.1"  # the test network's gateway: a guest holding it would take its neighbours' traffic


def _sender(tmp: Path) -> bytes:
    source, binary = tmp / "sendframes.c", tmp / "sendframes"
    source.write_text(SENDER_C)
    subprocess.run(["gcc", "-static", "-Os", "-o", str(binary), str(source)], check=True, capture_output=True)
    return binary.read_bytes()


def _frames(mac: str, ip: str, observer_ip: str) -> tuple[dict[str, bytes], dict[str, bytes], bytes]:
    link_local = _link_local(mac)
    attacks = {
        "spoofed MAC": frames.udp4(OTHER_MAC, ip, observer_ip, b"NEFOS-SPOOF-MAC"),
        "spoofed IPv4 source": frames.udp4(mac, OTHER_IP, observer_ip, b"NEFOS-SPOOF-IP"),
        "forged ARP reply": frames.arp_reply(mac, mac, OTHER_IP, observer_ip),
        "spoofed gateway source": frames.udp4(mac, GATEWAY_IP, observer_ip, b"NEFOS-SPOOF-GATEWAY"),
        "forged ARP reply for the gateway": frames.arp_reply(mac, mac, GATEWAY_IP, observer_ip),
        "spoofed IPv6 source": frames.neighbour_solicitation(mac, "fe80::1", "fe80::2"),
        "rogue router advertisement": frames.router_advertisement(mac, link_local),
        "forged neighbour advertisement": frames.neighbour_advertisement(mac, link_local, "fe80::1"),
        "DHCP server reply": frames.udp4(mac, ip, "255.255.255.255", b"NEFOS-DHCP-OFFER", sport=67, dport=68),
    }
    controls = {"its own IPv4": frames.udp4(mac, ip, observer_ip, b"NEFOS-OWN-IP"),
                "its own ARP": frames.arp_reply(mac, mac, ip, observer_ip),
                "its own neighbour advertisement": frames.neighbour_advertisement(mac, link_local, link_local)}
    end = frames.udp4(mac, ip, observer_ip, frames.END)
    return attacks, controls, end


def _link_local(mac: str) -> str:
    from nefos.agents.firewall import PortFilter
    return PortFilter("p", "t", mac, []).link_local


def _pack(sent: list[bytes]) -> bytes:
    return b"".join(struct.pack("!H", len(f)) + f for f in sent)


async def _attacker_image(cloud, tmp: Path, sent: list[bytes]) -> str:
    """A root image booting the tiny guest's kernel with an initramfs that sends ``sent``."""
    _, version = find_kernel()
    ramdisk = await asyncio.to_thread(build_initramfs, version, {
        "bin/sendframes": (_sender(tmp), 0o755), "etc/frames.bin": (_pack(sent), 0o644),
        "etc/nefos-after-boot": (AFTER_BOOT.encode(), 0o755)})
    admin = RequestContext(project_id=ADMIN["X-Project-Id"], user_id="e" * 32)

    async def one(data: bytes):
        yield data
    ari = await images.create(cloud.rt, admin, {"name": "attacker-ramdisk", "disk_format": "ari",
                                                 "container_format": "ari"})
    await images.upload(cloud.rt, admin, ari.id, one(ramdisk))
    root = await images.create(cloud.rt, admin, {
        "name": "attacker", "disk_format": "raw", "container_format": "bare",
        "kernel_id": cloud.guest_image["kernel_id"], "ramdisk_id": ari.id,
        "os_command_line": "console=ttyS0 panic=-1"})
    await images.upload(cloud.rt, admin, root.id, one(b"\0" * 1048576))
    return root.id


class Observer:
    """A veth on the network's bridge, its other end in a namespace of this test's, capturing."""

    def __init__(self, bridge: str):
        tag = uuid.uuid4().hex[:6]
        self.ns, self.outer, self.inner = f"nfspy-{tag}", f"spy{tag}", f"spyi{tag}"
        for argv in (["ip", "netns", "add", self.ns],
                     ["ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner],
                     ["ip", "link", "set", self.outer, "master", bridge], ["ip", "link", "set", self.outer, "up"],
                     ["ip", "link", "set", self.inner, "netns", self.ns],
                     ["ip", "-n", self.ns, "link", "set", self.inner, "up"]):
            subprocess.run(argv, check=True, capture_output=True)

    async def start(self):
        self.proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.ns, sys.executable, "-m", "tests.network.frames", "recv", self.inner, "180",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE)
        assert (await self.proc.stdout.readline()).strip() == b"READY"

    async def received(self) -> set[bytes]:
        out, _ = await self.proc.communicate()
        return {bytes.fromhex(line) for line in out.decode().split()}

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


@pytest.mark.parametrize("port_security", [True, False])
async def test_forged_frames_from_a_real_guest(lvcloud, tmp_path, port_security):
    cloud = lvcloud
    net = await make_network(cloud, name="spoof-net", cidr="10.79.0.0/24")
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": net["id"], "port_security_enabled": port_security,
        **({} if port_security else {"security_groups": []})}})
    assert r.status_code == 201, r.text
    port = r.json()["port"]
    mac, ip = port["mac_address"], port["fixed_ips"][0]["ip_address"]
    attacks, controls, end = _frames(mac, ip, "10.79.0.251")
    sent = list(attacks.values()) + list(controls.values()) + [end]
    image = await _attacker_image(cloud, tmp_path, sent)
    observer = Observer("brq" + net["id"][:11])
    try:
        await observer.start()
        r = await cloud.compute.post("/v2.1/servers", json={"server": {
            "name": "attacker", "imageRef": image, "flavorRef": "42", "networks": [{"port": port["id"]}]}})
        assert r.status_code == 202, r.text
        sid = r.json()["server"]["id"]
        await cloud.wait_status(sid, "ACTIVE", timeout=120)
        await wait_console(cloud, sid, f"NEFOS-ATTACK: {len(sent)} frames sent", timeout=120)
        received = await observer.received()
    finally:
        observer.close()
    assert end in received, "the guest's last, legitimate frame never reached the observer"
    assert [n for n, f in controls.items() if f not in received] == []
    through = [n for n, f in attacks.items() if f in received]
    if port_security:
        assert through == [], f"forged frames from a protected port reached the network: {through}"
    else:
        assert through == list(attacks), f"unprotected, every frame should pass; only {through} did"
