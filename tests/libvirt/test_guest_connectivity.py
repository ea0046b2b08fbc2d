"""The connectivity matrix of real guests under `nefos up` (shipped defaults), set up with the
`openstack` CLI and checked from inside the guests (SSH, busybox ``ping -c1 -W2`` / ``nc``):

- two guests on one network reach each other;
- guests on two subnets joined by one router reach each other;
- a guest without a floating IP reaches another address of the external network (a namespace
  on br-ex-nefos) through SNAT: it sees the router's gateway address; with a floating IP, that;
- a guest reaches nothing on the host's own address there (172.24.4.1): neither a service of
  the host nor its ping, while the host reaches the guests' floating IPs;
- a guest on a network with no router reaches nothing outside (not 172.24.4.1);
- a guest whose port is disabled (`openstack port set --disable`) stops answering through its
  floating IP and its port is DOWN; enabled again, ACTIVE and answering;
- a floating IP disassociated stops answering SSH and ping from the host.

One cloud and one set of guests (booted at once) for the module."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.libvirt.cli_cloud import SourceRecorder, UpCloud, host_ping, keygen, ssh, ssh_until

pytestmark = [pytest.mark.libvirt, pytest.mark.cli]

HOST_ADDRESS = "172.24.4.1"  # the host's address on br-ex-nefos (external_network_gateway)
NEIGHBOUR_ADDRESS = "172.24.4.5"  # another address on br-ex-nefos (below the allocation pool)
ROOT = Path(__file__).resolve().parents[2]
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


class ExternalNeighbour:
    """A namespace on br-ex-nefos at NEIGHBOUR_ADDRESS answering each TCP connection with its source
    address (another machine on the external network, as far as the routers can tell)."""

    def __init__(self, port: int = 7301):
        from tests.network.test_l3_agent import ECHO
        tag = uuid.uuid4().hex[:6]
        self.ns, self.outer, self.port = f"nfnb-{tag}", f"nb{tag}", port
        run = lambda *argv: subprocess.run(argv, check=True, capture_output=True)  # noqa: E731
        run("ip", "netns", "add", self.ns)
        run("ip", "link", "add", self.outer, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        run("ip", "link", "set", self.outer, "master", "br-ex-nefos", "up")
        run("ip", "-n", self.ns, "addr", "add", f"{NEIGHBOUR_ADDRESS}/24", "dev", "eth0")
        run("ip", "-n", self.ns, "link", "set", "eth0", "up")
        run("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-c", ECHO, str(port)],
                                     stdout=subprocess.PIPE, cwd=ROOT)
        assert self.proc.stdout.readline().strip() == b"ready"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


def test_a_guest_reaches_the_external_network_through_snat_as_the_router_s_gateway(matrix):
    m = matrix
    neighbour = ExternalNeighbour()
    try:
        r = _in_guest(m, "b1", f"echo hi | nc -w 5 {NEIGHBOUR_ADDRESS} {neighbour.port}; echo")
        assert r.stdout.split()[-1] == m["gateway"], r.stdout
        # A guest with a floating IP is seen as its floating IP.
        r = _in_guest(m, "a1", f"echo hi | nc -w 5 {NEIGHBOUR_ADDRESS} {neighbour.port}; echo", via_fip=True)
        assert r.stdout.split()[-1] == m["fip"], r.stdout
    finally:
        neighbour.close()


def test_a_guest_reaches_nothing_on_the_host_s_external_address(matrix):
    m = matrix
    listener = SourceRecorder("0.0.0.0")  # a service of the host on every address
    try:
        r = _in_guest(m, "b1", f"hostname; command -v nc; ping -c1 -W2 {HOST_ADDRESS} && echo reached; "
                               f"echo hi | nc -w 3 {HOST_ADDRESS} {listener.port} && echo reached; true")
        assert r.stdout.split()[:2] == ["b1", "nc"], r.stdout  # nc is there: its failing means something
        assert "reached" not in r.stdout and "seen-from" not in r.stdout, r.stdout
        assert listener.seen == []
        assert host_ping(m["fip"])  # the host reaches the guests
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


def _port_status(cloud, port_id: str, wanted: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (status := cloud.json("port", "show", port_id)["status"]) != wanted:
        assert time.monotonic() < deadline, f"port {port_id} is {status}, not {wanted}"
        time.sleep(0.5)


def test_a_guest_whose_port_is_disabled_stops_answering_until_it_is_enabled(matrix):
    m = matrix
    cloud = m["cloud"]
    _in_guest(m, "a1", "true", via_fip=True)
    assert host_ping(m["fip"])
    [port] = cloud.json("port", "list", "--server", "a1")
    cloud.osc("port", "set", "--disable", port["ID"])
    deadline = time.monotonic() + 30  # until the L2 agent took the tap down
    while host_ping(m["fip"]):
        assert time.monotonic() < deadline, f"{m['fip']} still answers ping"
    _port_status(cloud, port["ID"], "DOWN")
    assert ssh(m["key"], m["fip"], "true").returncode == 255
    assert not host_ping(m["fip"])
    cloud.osc("port", "set", "--enable", port["ID"])
    _port_status(cloud, port["ID"], "ACTIVE")
    _in_guest(m, "a1", "true", via_fip=True)
    assert host_ping(m["fip"])


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
