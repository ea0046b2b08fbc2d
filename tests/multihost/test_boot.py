"""Servers placed on each host (``nova:<host>``, as admin); the real guests get their addresses
from the network node's dnsmasq, across namespaces (VXLAN between the L2 agents): the tap libvirt
made in the root namespace was moved into its host's namespace and wired there by that host's L2
agent."""

from __future__ import annotations

import pytest

from tests.multihost.conftest import FAKE_HOST, REAL_HOSTS

pytestmark = [pytest.mark.libvirt, pytest.mark.postgres, pytest.mark.rabbit]


def test_servers_placed_on_each_host_and_real_guests_lease_from_the_network_node(multihost):
    net = multihost.make_network("mh-boot", "10.61.0.0/24")
    assert net["provider:network_type"] == "vxlan", net
    placed = {host: multihost.boot(f"mh-on-{host}", net["id"], host=host) for host in (*REAL_HOSTS, FAKE_HOST)}
    try:
        servers = {host: multihost.wait_server(sid, "ACTIVE") for host, sid in placed.items()}
        assert {h: s["OS-EXT-SRV-ATTR:host"] for h, s in servers.items()} == {h: h for h in placed}
        for host in REAL_HOSTS:
            sid = placed[host]
            addr = servers[host]["addresses"]["mh-boot"][0]["addr"]
            out = multihost.wait_console(sid, f"NEFOS-IP: {addr}/24 on eth0")
            assert "NEFOS-BOOT" in out
            port = multihost.network.get("/v2.0/ports", params={"device_id": sid}).json()["ports"][0]
            assert port["status"] == "ACTIVE" and port["binding:host_id"] == host, port
            tap = "tap" + port["id"][:11]
            # The tap is in its host's namespace (in the network's bridge), not in the root one.
            link = multihost.in_namespace(host, "ip", "-o", "link", "show", tap).stdout
            assert f"master brq{net['id'][:11]}" in link, link
            assert multihost.in_namespace(FAKE_HOST, "ip", "link", "show", tap).returncode != 0
        # The network node's L2 agent reported the DHCP port's tap (its veth into the bridge).
        dhcp = multihost.network.get("/v2.0/ports", params={"network_id": net["id"],
                                                            "device_owner": "network:dhcp"}).json()["ports"]
        assert [(p["status"], p["binding:host_id"]) for p in dhcp] == [("ACTIVE", multihost.network_host)], dhcp
    finally:
        for sid in placed.values():
            multihost.compute.delete(f"/v2.1/servers/{sid}")
        for sid in placed.values():
            multihost.wait_server(sid, None)
