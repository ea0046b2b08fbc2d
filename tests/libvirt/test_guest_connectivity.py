"""The connectivity matrix of real guests under `nefos up` (shipped defaults), set up with the
`openstack` CLI and checked from inside the guests (SSH, busybox ``ping -c1 -W2`` / ``nc``):

- two guests on one network reach each other;
- guests on two subnets joined by one router reach each other;
- a guest without a floating IP reaches the host's 172.24.4.1 through SNAT: the host sees the
  router's gateway address;
- a guest on a network with no router reaches nothing outside (not 172.24.4.1);
- a floating IP disassociated stops answering SSH and ping from the host.

One cloud and one set of guests (booted at once) for the module."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.libvirt.cli_cloud import SourceRecorder, UpCloud, host_ping, keygen, ssh, ssh_until

pytestmark = [pytest.mark.libvirt, pytest.mark.cli]

HOST_ADDRESS = "172.24.4.1"  # the host's address on br-ex-nefos (external_network_gateway)
NETWORKS = {"net-a": "10.67.1.0/24", "net-b": "10.67.2.0/24", "net-iso": "10.67.3.0/24"}
GUESTS = {"a1": "net-a", "a2": "net-a", "b1": "net-b", "iso1": "net-iso"}


@pytest.fixture(scope="module")
def matrix(libvirtd, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("connectivity")
    cloud = UpCloud()
    try:
        key = tmp / "key"
        cloud.osc("keypair", "create", "--public-key", str(keygen(key)), "k")
        nets = {}
        for name, cidr in NETWORKS.items():
            nets[name] = cloud.json("network", "create", name)["id"]
            cloud.osc("subnet", "create", "--network", name, "--subnet-range", cidr, f"{name}-subnet")
        cloud.json("router", "create", "r")
        cloud.osc("router", "set", "--external-gateway", "public", "r")
        for name in ("net-a", "net-b"):  # net-iso has no router
            cloud.osc("router", "add", "subnet", "r", f"{name}-subnet")
        cloud.osc("security", "group", "rule", "create", "--protocol", "tcp", "--dst-port", "22", "default")
        cloud.osc("security", "group", "rule", "create", "--protocol", "icmp", "default")

        def boot(name: str) -> dict:
            return cloud.json("server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--network",
                              GUESTS[name], "--key-name", "k", "--wait", name)

        with ThreadPoolExecutor(len(GUESTS)) as pool:  # the guests boot at once
            servers = dict(zip(GUESTS, pool.map(boot, GUESTS)))
        ips = {}
        for name, server in servers.items():
            assert server["status"] == "ACTIVE", server
            (ips[name],) = server["addresses"][GUESTS[name]]
        fip = cloud.json("floating", "ip", "create", "public")["floating_ip_address"]
        cloud.osc("server", "add", "floating", "ip", "a1", fip)
        gateway = cloud.json("router", "show", "r")["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
        yield {"cloud": cloud, "key": key, "ips": ips, "fip": fip, "gateway": gateway,
               "ns": {name: f"qdhcp-{nets[net]}" for name, net in GUESTS.items()}}
    finally:
        cloud.stop()


def _in_guest(m, name: str, command: str, expect=lambda r: r.returncode == 0, via_fip=False):
    """``command`` in guest ``name`` over SSH (from the host to its floating IP, or from its network's
    DHCP namespace), retried until ``expect`` holds while it boots."""
    if via_fip:
        return ssh_until(m["key"], m["fip"], command, expect=expect)
    return ssh_until(m["key"], m["ips"][name], command, netns=m["ns"][name], expect=expect)


def test_two_guests_on_one_network_reach_each_other(matrix):
    m = matrix
    r = _in_guest(m, "a1", f"ping -c1 -W2 {m['ips']['a2']}", via_fip=True)
    assert "1 packets received" in r.stdout, r.stdout
    _in_guest(m, "a2", f"ping -c1 -W2 {m['ips']['a1']}")


def test_guests_on_two_subnets_joined_by_a_router_reach_each_other(matrix):
    m = matrix
    _in_guest(m, "a1", f"ping -c1 -W2 {m['ips']['b1']}", via_fip=True)
    _in_guest(m, "b1", f"ping -c1 -W2 {m['ips']['a1']}")
    r = _in_guest(m, "b1", f"hostname; ping -c1 -W2 {m['ips']['a2']} >/dev/null && echo ok")
    assert r.stdout.split() == ["b1", "ok"], r.stdout


def test_a_guest_reaches_the_host_through_snat_as_the_router_s_gateway(matrix):
    m = matrix
    listener = SourceRecorder(HOST_ADDRESS)
    try:
        _in_guest(m, "b1", f"ping -c1 -W2 {HOST_ADDRESS}")
        r = _in_guest(m, "b1", f"echo hi | nc {HOST_ADDRESS} {listener.port}")
        assert r.stdout.splitlines()[-1] == f"seen-from {m['gateway']}", r.stdout
        assert listener.seen == [m["gateway"]], listener.seen
        listener.seen.clear()
        # A guest with a floating IP is seen as its floating IP.
        r = _in_guest(m, "a1", f"echo hi | nc {HOST_ADDRESS} {listener.port}", via_fip=True)
        assert r.stdout.splitlines()[-1] == f"seen-from {m['fip']}", r.stdout
    finally:
        listener.close()


def test_a_network_without_a_router_reaches_nothing_outside(matrix):
    m = matrix
    listener = SourceRecorder(HOST_ADDRESS)
    try:
        r = _in_guest(m, "iso1", f"hostname; command -v nc; ping -c1 -W2 {HOST_ADDRESS} && echo reached; "
                                 f"echo hi | nc {HOST_ADDRESS} {listener.port} && echo reached; "
                                 f"ping -c1 -W2 {m['ips']['a1']} && echo reached; true")
        assert r.stdout.split()[:2] == ["iso1", "nc"], r.stdout  # nc is there: its failing means something
        assert "reached" not in r.stdout and "seen-from" not in r.stdout, r.stdout
        assert listener.seen == []
    finally:
        listener.close()


def test_a_disassociated_floating_ip_stops_answering(matrix):
    m = matrix
    _in_guest(m, "a1", "true", via_fip=True)
    assert host_ping(m["fip"])
    m["cloud"].osc("server", "remove", "floating", "ip", "a1", m["fip"])
    deadline = time.monotonic() + 30  # until the L3 agent applied it
    while host_ping(m["fip"]):
        assert time.monotonic() < deadline, f"{m['fip']} still answers ping"
    r = ssh(m["key"], m["fip"], "true")
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    assert not host_ping(m["fip"])
    shown = m["cloud"].json("server", "show", "a1")
    assert m["fip"] not in str(shown["addresses"]), shown["addresses"]
    # The guest itself is still there, on its network.
    _in_guest(m, "a1", "true")
