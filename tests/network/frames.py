"""Raw Ethernet frames for the anti-spoofing tests, built by hand (no packet library), and a
sender/receiver run inside a network namespace: ``python -m tests.network.frames send IFACE FILE``
sends each frame of a JSON list of hex strings; ``... stream IFACE FILE STOPFILE`` sends them over
and over (one every half millisecond) until STOPFILE exists, then the end marker frame (the file's
last); ``... recv IFACE SECONDS`` prints every frame received, one hex string a line, until the end
marker arrives (at most SECONDS)."""

from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import struct
import sys
import time

BROADCAST = "ff:ff:ff:ff:ff:ff"
ALL_NODES = "33:33:00:00:00:01"
END = b"NEFOS-END"


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ethernet(src: str, dst: str, ethertype: int, payload: bytes) -> bytes:
    return _mac(dst) + _mac(src) + struct.pack("!H", ethertype) + payload


def udp4(src_mac: str, src_ip: str, dst_ip: str, marker: bytes, dst_mac: str = BROADCAST,
         sport: int = 40000, dport: int = 40001) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(marker), 0) + marker
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                         ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed)
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return ethernet(src_mac, dst_mac, 0x0800, header + udp)


def arp_reply(src_mac: str, sender_mac: str, sender_ip: str, target_ip: str) -> bytes:
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 2, _mac(sender_mac),
                       ipaddress.IPv4Address(sender_ip).packed, _mac(BROADCAST),
                       ipaddress.IPv4Address(target_ip).packed)
    return ethernet(src_mac, BROADCAST, 0x0806, body)


def icmpv6(src_mac: str, src_ip: str, dst_ip: str, icmp_type: int, body: bytes, dst_mac: str = ALL_NODES) -> bytes:
    src, dst = ipaddress.IPv6Address(src_ip).packed, ipaddress.IPv6Address(dst_ip).packed
    message = struct.pack("!BBH", icmp_type, 0, 0) + body
    pseudo = src + dst + struct.pack("!I3xB", len(message), 58)
    message = message[:2] + struct.pack("!H", _checksum(pseudo + message)) + message[4:]
    header = struct.pack("!IHBB", 6 << 28, len(message), 58, 255) + src + dst
    return ethernet(src_mac, dst_mac, 0x86DD, header + message)


def router_advertisement(src_mac: str, src_ip: str, prefix: str = "2001:db8:bad::") -> bytes:
    """A rogue RA: "I am your default router, and here is a prefix" (hop limit 64, lifetime 1800 s)."""
    ra = struct.pack("!BBHII", 64, 0, 1800, 0, 0)
    prefix_option = struct.pack("!BBBBIII16s", 3, 4, 64, 0xC0, 86400, 14400, 0,
                                ipaddress.IPv6Address(prefix).packed)
    source_option = struct.pack("!BB6s", 1, 1, _mac(src_mac))
    return icmpv6(src_mac, src_ip, "ff02::1", 134, ra + prefix_option + source_option)


def arp_probe(src_mac: str, target_ip: str) -> bytes:
    """An ARP probe (RFC 5227): "is anyone at ``target_ip``?", asked from sender address 0.0.0.0."""
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, _mac(src_mac), bytes(4), bytes(6),
                       ipaddress.IPv4Address(target_ip).packed)
    return ethernet(src_mac, BROADCAST, 0x0806, body)


def neighbour_solicitation(src_mac: str, src_ip: str, target: str) -> bytes:
    body = struct.pack("!I16s", 0, ipaddress.IPv6Address(target).packed) + struct.pack("!BB6s", 1, 1, _mac(src_mac))
    return icmpv6(src_mac, src_ip, "ff02::1", 135, body)


def neighbour_advertisement(src_mac: str, src_ip: str, target: str) -> bytes:
    """An unsolicited "``target`` is at ``src_mac``" (override flag set), to all nodes."""
    body = struct.pack("!I16s", 0x20000000, ipaddress.IPv6Address(target).packed)
    return icmpv6(src_mac, src_ip, "ff02::1", 136, body + struct.pack("!BB6s", 2, 1, _mac(src_mac)))


def _send(iface: str, path: str) -> None:
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for frame in json.load(open(path)):
            s.send(bytes.fromhex(frame))


def _stream(iface: str, path: str, stop_file: str) -> None:
    *frames, end = [bytes.fromhex(f) for f in json.load(open(path))]
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        print("SENDING", flush=True)
        sent = 0
        while not os.path.exists(stop_file):
            for frame in frames:
                s.send(frame)
            sent += 1
            time.sleep(0.0005)  # a steady stream, not a flood the receiver cannot keep up with
        s.send(end)
        print(sent, flush=True)


def _recv(iface: str, deadline: float) -> None:
    """Print every frame received until the sender's end marker (the last frame it sends, one that
    passes every filter: frames on one path keep their order) or ``deadline`` seconds."""
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003)) as s:
        s.bind((iface, 0))
        print("READY", flush=True)
        stop = time.monotonic() + deadline
        while time.monotonic() < stop:
            ready, _, _ = select.select([s], [], [], 0.1)
            if not ready:
                continue
            data, address = s.recvfrom(65535)
            if address[2] == socket.PACKET_OUTGOING:
                continue
            print(data.hex(), flush=True)
            if END in data:
                return


if __name__ == "__main__":
    if sys.argv[1] == "send":
        _send(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "stream":
        _stream(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        _recv(sys.argv[2], float(sys.argv[3]))
