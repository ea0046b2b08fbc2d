"""A router on the network node serves guests on the compute hosts over VXLAN, and a floating IP
reaches a guest through it.

The L3 agent runs in the network node's namespace; when it takes the router, the network service
binds the router's ports to its host (as Neutron binds a legacy router's ports to its L3 agent's
host), the node's L2 agent reports the ``qr-`` veth's outer end, and L2 population gives each
compute host the flood entry and the router's MAC and address at the node's VTEP (and the node the
guests'). Guests on two hosts ping their router's interface address; then, from a namespace on the
node's external bridge (the external network as ``nefos up`` makes it: ``172.24.4.0/24``, the
outside at ``.1``, nothing routed off the machine), ping and a TCP connection to the mhost1
guest's floating IP reach it through the router's DNAT and SNAT in its ``qrouter-`` namespace.
"""

from __future__ import annotations

import base64
import re
import sys
import time

import pytest

from tests.multihost.conftest import REAL_HOSTS
from tests.multihost.underlay import run

pytestmark = [pytest.mark.libvirt, pytest.mark.postgres, pytest.mark.rabbit]

EXTERNAL_CIDR, OUTSIDE = "172.24.4.0/24", "172.24.4.1"  # the shipped external_network_cidr / _gateway
EXTERNAL_BRIDGE = "br-ex-nefos"  # the shipped l3_external_bridge, in the network node's namespace
TENANT_CIDR, ROUTER_IP = "10.64.0.0/24", "10.64.0.1"

PING_ROUTER = """#!/bin/sh
for i in $(seq 1 90); do
    if ping -c 1 -W 1 {ip} >/dev/null 2>&1; then echo "NEFOS-PING: {ip} answered"; exit 0; fi
    sleep 1
done
echo "NEFOS-PING: {ip} did not answer"
"""


class Outside:
    """A namespace on the network node's external bridge holding ``OUTSIDE``: the world beyond
    the routers' gateways, made and removed by the test."""

    def __init__(self, cloud):
        token = cloud.underlay.token
        self.ns, self.inside, self.outside = f"mh{token}-outside", f"mh{token}xi", f"mh{token}xo"
        self.node_ns = cloud.network_ns
        run("ip", "netns", "add", self.ns)
        try:
            run("ip", "link", "add", self.outside, "type", "veth", "peer", "name", self.inside, "netns", self.ns)
            run("ip", "link", "set", self.outside, "netns", self.node_ns)
            run("ip", "-n", self.node_ns, "link", "set", self.outside, "master", EXTERNAL_BRIDGE, "up")
            run("ip", "-n", self.ns, "addr", "add", f"{OUTSIDE}/24", "dev", self.inside)
            run("ip", "-n", self.ns, "link", "set", self.inside, "up")
            run("ip", "-n", self.ns, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    def ping_ttl(self, ip: str) -> int | None:
        """The TTL of the echo reply from ``ip`` (None: no answer). 63 is a guest's 64 less the
        router's hop: the reply came from behind the router, not from the router itself."""
        out = run("ip", "netns", "exec", self.ns, "busybox", "ping", "-c", "1", "-W", "1", ip, check=False).stdout
        found = re.search(r"ttl=(\d+)", out)
        return int(found.group(1)) if found else None

    def greeting(self, ip: str, port: int) -> str:
        """What a TCP server at ``ip``:``port`` says first ("" when it cannot be reached)."""
        code = (f"import socket; s = socket.create_connection(({ip!r}, {port}), timeout=2); "
                "print(s.recv(64).decode(errors='replace')); s.close()")
        return run("ip", "netns", "exec", self.ns, sys.executable, "-c", code, check=False).stdout

    def remove(self) -> None:
        run("ip", "-n", self.node_ns, "link", "del", self.outside, check=False)
        run("ip", "netns", "del", self.ns, check=False)


def _ok(r, *codes: int) -> dict:
    assert r.status_code in codes, r.text
    return r.json() if r.content else {}


def _security_group(cloud, name: str) -> dict:
    """A group of the test's own letting ICMP and SSH in from anywhere (the session's default group
    is the other tests' business); a new group lets everything out, as Neutron's."""
    group = _ok(cloud.network.post("/v2.0/security-groups", json={"security_group": {"name": name}}),
                201)["security_group"]
    for protocol, port in (("icmp", None), ("tcp", 22)):
        rule = {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4",
                "protocol": protocol, "remote_ip_prefix": "0.0.0.0/0"}
        if port is not None:
            rule.update(port_range_min=port, port_range_max=port)
        _ok(cloud.network.post("/v2.0/security-group-rules", json={"security_group_rule": rule}), 201)
    return group


def _until(what: str, predicate, cloud, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout} s\n{cloud.logs()}"
        time.sleep(1)


def test_guests_on_two_hosts_reach_their_router_on_the_network_node_and_a_floating_ip_reaches_one(multihost):
    cloud = multihost
    net = cloud.make_network("mh-routed", TENANT_CIDR)
    subnet_id = cloud.network.get("/v2.0/subnets", params={"network_id": net["id"]}).json()["subnets"][0]["id"]
    public = _ok(cloud.network.post("/v2.0/networks", json={"network": {
        "name": "mh-public", "router:external": True}}), 201)["network"]
    _ok(cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": public["id"], "cidr": EXTERNAL_CIDR, "ip_version": 4, "enable_dhcp": False,
        "gateway_ip": OUTSIDE, "allocation_pools": [{"start": "172.24.4.10", "end": "172.24.4.250"}]}}), 201)
    router = _ok(cloud.network.post("/v2.0/routers", json={"router": {
        "name": "mh-router", "external_gateway_info": {"network_id": public["id"]}}}), 201)["router"]
    _ok(cloud.network.put(f"/v2.0/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet_id}), 200)
    group = _security_group(cloud, f"mh-routed-{cloud.underlay.token}")
    outside = Outside(cloud)
    servers: list[str] = []
    fip = None
    try:
        # The network node's L3 agent took the router: its ports are bound to the node's host, and
        # the node's L2 agent reported the interface's tap up (the port ACTIVE).
        def bound():
            ports = cloud.network.get("/v2.0/ports", params={"device_id": router["id"]}).json()["ports"]
            return len(ports) == 2 and {p["binding:host_id"] for p in ports} == {cloud.network_host} and \
                [p["status"] for p in ports if p["device_owner"] == "network:router_interface"] == ["ACTIVE"]
        _until("the router's ports bound to the network node, its interface ACTIVE", bound, cloud)

        script = base64.b64encode(PING_ROUTER.format(ip=ROUTER_IP).encode()).decode()
        for i, host in enumerate(REAL_HOSTS):
            servers.append(cloud.boot(f"mh-routed-{i}", net["id"], host=host, user_data=script, config_drive=True,
                                      security_groups=[{"name": group["name"]}]))
        for sid in servers:
            cloud.wait_server(sid, "ACTIVE")
        target_port = cloud.network.get("/v2.0/ports", params={"device_id": servers[0]}).json()["ports"][0]
        assert target_port["security_groups"] == [group["id"]], target_port
        for sid in servers:
            out = cloud.wait_console(sid, "NEFOS-PING: ", timeout=300)
            assert f"NEFOS-PING: {ROUTER_IP} answered" in out, out[-2000:]

        fip = _ok(cloud.network.post("/v2.0/floatingips", json={"floatingip": {
            "floating_network_id": public["id"], "port_id": target_port["id"]}}), 201)["floatingip"]
        address = fip["floating_ip_address"]
        ttls = []
        _until(f"{address} answering ping from the outside", lambda: ttls.append(outside.ping_ttl(address))
               or ttls[-1] is not None, cloud)
        assert ttls[-1] == 63, ttls  # the guest answered, one routed hop away (the router's own: 64)
        # TCP too: the guest's SSH server greets through the DNAT (in) and its conntrack reverse (out).
        _until(f"{address}:22 greeting from the outside", lambda: "SSH-2.0-" in outside.greeting(address, 22), cloud)
    finally:
        if fip:
            cloud.network.delete(f"/v2.0/floatingips/{fip['id']}")
        for sid in servers:
            cloud.compute.delete(f"/v2.1/servers/{sid}")
        for sid in servers:
            cloud.wait_server(sid, None)
        outside.remove()
        cloud.network.put(f"/v2.0/routers/{router['id']}/remove_router_interface", json={"subnet_id": subnet_id})
        cloud.network.put(f"/v2.0/routers/{router['id']}", json={"router": {"external_gateway_info": {}}})
        cloud.network.delete(f"/v2.0/routers/{router['id']}")
        cloud.network.delete(f"/v2.0/networks/{public['id']}")
        cloud.network.delete(f"/v2.0/security-groups/{group['id']}")
