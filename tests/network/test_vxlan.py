"""Tenant networks across hosts over VXLAN, as Neutron's Linux-bridge agent with L2 population.

Two hosts (and a third with no port on the network), each a namespace with an underlay address
and its own ``nefos l2-agent`` process (``local_ip`` set, no database URL); a port bound to each
of the first two with a guest namespace behind its tap. Guests ping each other across the
tunnel; broadcast reaches only the host with ports; a forged source address still never leaves
its host; the forwarding entries follow the port to another host and go with it."""

from __future__ import annotations

import re
import sys
import uuid

import pytest

from nefos.context import admin_context
from nefos.db.models import NetworkAgent
from nefos.clients.network_agents import L2_AGENT
from tests.network.hosts import Lab, in_ns, until

pytestmark = pytest.mark.rabbit

PROJECT = "p" * 32


@pytest.fixture
async def lab(tmp_path):
    lab = Lab(tmp_path)
    try:
        yield lab
    finally:
        await lab.close()


async def _port(manager, network, host: dict) -> dict:
    return await manager.create_port(admin_context(), {
        "network_id": network["id"], "project_id": PROJECT, "device_owner": "compute:nova",
        "device_id": str(uuid.uuid4()), "binding:host_id": host["name"]})


async def _status(manager, port_id: str) -> str:
    return (await manager.get_port(admin_context(), port_id))["status"]


def _pings(ns: str, ip: str, *extra: str) -> bool:
    out = in_ns(ns, "busybox", "ping", "-c", "1", "-W", "1", *extra, ip, check=False)
    return " 0% packet loss" in out


def _fdb(host: dict, vni: int) -> tuple[set, set]:
    """(flood VTEPs, (MAC, VTEP)) on the host's vxlan-<vni>."""
    flood, macs = set(), set()
    for line in in_ns(host["ns"], "bridge", "fdb", "show", "dev", f"vxlan-{vni}", check=False).splitlines():
        m = re.match(r"(\S+) dst (\S+) self", line)
        if m:
            (flood.add(m.group(2)) if m.group(1) == "00:00:00:00:00:00" else macs.add((m.group(1), m.group(2))))
    return flood, macs


def _has_device(host: dict, vni: int) -> bool:
    return bool(in_ns(host["ns"], "ip", "-o", "link", "show", f"vxlan-{vni}", check=False).strip())


def _packets_from(ns: str, source: str) -> int:
    """Packets from ``source`` the namespace received (a counting rule the test added)."""
    for line in in_ns(ns, "iptables", "-nvxL", "INPUT").splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[7] == source:
            return int(fields[0])
    raise AssertionError(f"no counting rule for {source} in {ns}")


def _vxlan_packets_in(host: dict) -> int:
    """VXLAN packets the host's underlay received (a counting rule the test added)."""
    out = in_ns(host["ns"], "iptables", "-nvxL", "INPUT")
    for line in out.splitlines():
        if "udp dpt:4789" in line:
            return int(line.split()[0])
    return 0


async def test_guests_on_two_hosts_reach_each_other_over_vxlan(lab):
    manager = await lab.start_cloud()
    net = await manager.create_network(admin_context(), {"name": "vx", "project_id": PROJECT})
    assert net["provider:network_type"] == "vxlan" and net["mtu"] == 1450
    vni = net["provider:segmentation_id"]
    await manager.create_subnet(admin_context(), {"network_id": net["id"], "cidr": "10.77.0.0/24", "ip_version": 4,
                                                  "enable_dhcp": False, "project_id": PROJECT})
    h1, h2, h3 = await lab.host(1), await lab.host(2), await lab.host(3)
    for h in (h1, h2, h3):  # the agents started and told the network service their VTEPs
        in_ns(h["ns"], "iptables", "-I", "INPUT", "-p", "udp", "--dport", "4789")

    async def vteps():
        async with lab.rt.db.reader() as s:
            from sqlalchemy import select
            return {r.host: r.tunneling_ip for r in (await s.execute(select(NetworkAgent).where(
                NetworkAgent.agent_type == L2_AGENT))).scalars()}
    await until(lambda: _all_vteps(vteps, (h1, h2, h3)), "every agent's VTEP recorded", lab)

    p1, p2 = await _port(manager, net, h1), await _port(manager, net, h2)
    g1, g2 = lab.guest(h1, p1), lab.guest(h2, p2)
    ip1, ip2 = p1["fixed_ips"][0]["ip_address"], p2["fixed_ips"][0]["ip_address"]
    for p in (p1, p2):
        await until(lambda p=p: is_active(manager, p["id"]), f"port {p['id']} ACTIVE", lab)

    # L2 population: each host floods to the other (never to h3, which has no port) and knows its MAC.
    await until(lambda: _fdb(h1, vni) == ({h2["ip"]}, {(p2["mac_address"], h2["ip"])}), "h1's entries", lab)
    await until(lambda: _fdb(h2, vni) == ({h1["ip"]}, {(p1["mac_address"], h1["ip"])}), "h2's entries", lab)
    assert not _has_device(h3, vni)
    link = in_ns(h1["ns"], "ip", "-d", "link", "show", f"vxlan-{vni}")
    assert f"vxlan id {vni} local {h1['ip']}" in link and "nolearning" in link and "proxy" in link
    assert "mtu 1450" in link and "mtu 1450" in in_ns(h1["ns"], "ip", "link", "show", "tap" + p1["id"][:11])
    # the ARP proxy's entry: h1 answers for p2's address itself
    assert p2["mac_address"] in in_ns(h1["ns"], "ip", "neigh", "show", ip2, "dev", f"vxlan-{vni}")

    await until(lambda: _pings(g1, ip2), "g1 -> g2 over the tunnel", lab)
    assert _pings(g2, ip1)
    assert _vxlan_packets_in(h2) > 0

    # Broadcast floods to the hosts with ports on the network only.
    before = {h["name"]: _vxlan_packets_in(h) for h in (h2, h3)}
    in_ns(g1, sys.executable, "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1); "
          "[s.sendto(b'flood', ('10.77.0.255', 9)) for _ in range(3)]")
    assert _vxlan_packets_in(h2) > before[h2["name"]]
    assert _vxlan_packets_in(h3) == before[h3["name"]] == 0

    # Anti-spoofing still holds at the sending host: a forged source address never crosses the
    # tunnel, though the receiving port's security group would let it in (ICMP from anywhere).
    default = [g for g in await manager.list_security_groups(admin_context(), filters={"project_id": [PROJECT]})
               if g["name"] == "default"][0]
    await manager.create_security_group_rule(admin_context(), {"security_group_rule": {
        "security_group_id": default["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp",
        "remote_ip_prefix": "0.0.0.0/0", "project_id": PROJECT}}["security_group_rule"])
    await until(lambda: "-p icmp -j RETURN" in in_ns(h2["ns"], "iptables", "-S"), "h2 lets ICMP in", lab)
    in_ns(g1, "ip", "addr", "add", "10.77.0.199/32", "dev", "eth0")
    in_ns(g1, "ip", "neigh", "replace", ip2, "lladdr", p2["mac_address"], "dev", "eth0")
    in_ns(g2, "iptables", "-I", "INPUT", "-s", "10.77.0.199", "-j", "ACCEPT")
    in_ns(g2, "iptables", "-I", "INPUT", "-s", ip1, "-j", "ACCEPT")
    assert not _pings(g1, ip2, "-I", "10.77.0.199")
    assert _packets_from(g2, "10.77.0.199") == 0
    assert _pings(g1, ip2)  # its own address still passes
    assert _packets_from(g2, ip1) > 0

    # The port moves to h3 (its guest too): h1's entries follow it, h2 (no port left) leaves the network.
    in_ns(h2["ns"], "ip", "link", "del", "tap" + p2["id"][:11])
    await manager.update_port(admin_context(), p2["id"], {"binding:host_id": h3["name"]})
    g3 = lab.guest(h3, p2)
    await until(lambda: _fdb(h1, vni) == ({h3["ip"]}, {(p2["mac_address"], h3["ip"])}), "h1's entries moved", lab)
    await until(lambda: not _has_device(h2, vni), "h2's VXLAN device removed", lab)
    await until(lambda: _pings(g1, ip2), "g1 -> the moved guest on h3", lab)
    assert _pings(g3, ip1)

    # The port goes away: its entries go from h1, and h3 leaves the network.
    await manager.delete_port(admin_context(), p2["id"])
    await until(lambda: _fdb(h1, vni) == (set(), set()), "h1's entries for the port removed", lab)
    assert not in_ns(h1["ns"], "ip", "neigh", "show", ip2, "dev", f"vxlan-{vni}").strip()
    await until(lambda: not _has_device(h3, vni), "h3's VXLAN device removed", lab)
    assert not _pings(g1, ip2)


async def _all_vteps(vteps, hosts) -> bool:
    recorded = await vteps()
    return all(recorded.get(h["name"]) == h["ip"] for h in hosts)


async def is_active(manager, port_id: str) -> bool:
    return await _status(manager, port_id) == "ACTIVE"


async def test_the_l2_agent_runs_without_a_database_and_without_vxlan_by_default(lab):
    """The shipped defaults: no ``local_ip`` (no tunnels: the host's networks stay on it) and, as
    every agent, no database URL: the agent wires a guest's tap and its port goes ACTIVE, all over
    the bus; no database file appears in its state directory."""
    manager = await lab.start_cloud()
    net = await manager.create_network(admin_context(), {"name": "local", "project_id": PROJECT})
    await manager.create_subnet(admin_context(), {"network_id": net["id"], "cidr": "10.78.0.0/24", "ip_version": 4,
                                                  "enable_dhcp": False, "project_id": PROJECT})
    h1 = await lab.host(1, vxlan=False)
    port = await _port(manager, net, h1)
    lab.guest(h1, port)
    await until(lambda: is_active(manager, port["id"]), "the port ACTIVE", lab)
    bridge = "brq" + net["id"][:11]
    assert f"master {bridge}" in in_ns(h1["ns"], "ip", "link", "show", "tap" + port["id"][:11])
    assert not _has_device(h1, net["provider:segmentation_id"])
    assert not any(p.suffix in (".sqlite", ".db") or "sqlite" in p.name for p in h1["state"].rglob("*"))
    lab.check_alive()


async def test_a_guest_gets_its_address_from_the_network_nodes_dhcp_agent_over_vxlan(lab):
    """The DHCP agent on a network node (its own host, with an L2 agent with ``local_ip``) joins
    the network's VXLAN: a guest on another host gets its address, and the network's MTU (option
    26), from dnsmasq there; its port goes ACTIVE once the DHCP agent acknowledged it."""
    manager = await lab.start_cloud()
    net = await manager.create_network(admin_context(), {"name": "vx-dhcp", "project_id": PROJECT})
    vni = net["provider:segmentation_id"]
    await manager.create_subnet(admin_context(), {"network_id": net["id"], "cidr": "10.79.0.0/24", "ip_version": 4,
                                                  "project_id": PROJECT})
    node, h1 = await lab.host(1, dhcp=True), await lab.host(2)
    dhcp_ports = lambda: manager.list_ports(admin_context(), filters={  # noqa: E731
        "network_id": [net["id"]], "device_owner": ["network:dhcp"]})
    (dhcp_port,) = await until(dhcp_ports, "the network node's DHCP port", lab, timeout=60)
    assert dhcp_port["binding:host_id"] == node["name"]
    port = await _port(manager, net, h1)
    guest = lab.guest(h1, port, prefix=None)
    await until(lambda: _fdb(h1, vni)[0] == {node["ip"]}, "h1 floods to the network node", lab)
    script = lab.tmp / "udhcpc.sh"
    script.write_text('#!/bin/sh\necho "NEFOS-DHCP $1 ip=$ip mtu=$mtu"\n')
    script.chmod(0o755)
    out = await until(lambda: _dhcp(guest, script), "a DHCP lease over the tunnel", lab, timeout=60)
    assert f"ip={port['fixed_ips'][0]['ip_address']} mtu=1450" in out, out
    await until(lambda: is_active(manager, port["id"]), "the port ACTIVE (L2 and DHCP done)", lab)


def _dhcp(ns: str, script) -> str | None:
    out = in_ns(ns, "busybox", "udhcpc", "-i", "eth0", "-n", "-q", "-f", "-t", "3", "-T", "1", "-O", "mtu",
                "-s", str(script), check=False)
    return out if "NEFOS-DHCP bound" in out else None
