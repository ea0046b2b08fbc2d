"""A guest you can use, as a new user gets one: `nefos up` with real guests and its shipped defaults,
then exactly the `openstack` commands a user types (key pair from ssh-keygen, network, subnet,
router to `public`, security group rules, a server with user data, a floating IP), then `ssh` from
the host to the floating IP shows the user data ran and the server's hostname.

Once with the metadata service (the guest asks it), once with a config drive and `nefos up`
serving no metadata service (``enabled_apis = osapi_compute``)."""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.libvirt.cli_cloud import UpCloud, keygen, ssh_until

pytestmark = [pytest.mark.libvirt, pytest.mark.cli]

HELLO = "#!/bin/sh\necho hello-from-user-data > /root/hello\n"
CONFIG_LINE = re.compile(r"NEFOS-CONFIG: source=(\S+) uuid=(\S+) hostname=(\S+) keys=(\d+) user-data=(\S+)")


def _a_usable_guest(cloud: UpCloud, tmp_path, cidr: str, *server_options: str) -> tuple[dict, str]:
    """The user's commands, from a new key pair to ``ssh root@<floating ip>``; returns the server and
    its console."""
    pub = keygen(tmp_path / "key")
    (tmp_path / "hello.sh").write_text(HELLO)
    cloud.osc("keypair", "create", "--public-key", str(pub), "k")
    cloud.json("network", "create", "net1")
    cloud.osc("subnet", "create", "--network", "net1", "--subnet-range", cidr, "subnet1")
    cloud.json("router", "create", "r")
    cloud.osc("router", "set", "--external-gateway", "public", "r")
    cloud.osc("router", "add", "subnet", "r", "subnet1")
    cloud.osc("security", "group", "rule", "create", "--protocol", "tcp", "--dst-port", "22", "default")
    cloud.osc("security", "group", "rule", "create", "--protocol", "icmp", "default")
    server = cloud.json("server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--network", "net1",
                        "--key-name", "k", "--user-data", str(tmp_path / "hello.sh"), *server_options, "--wait",
                        "vm1")
    assert server["status"] == "ACTIVE", server
    fip = cloud.json("floating", "ip", "create", "public")["floating_ip_address"]
    assert fip.startswith("172.24.4."), fip
    cloud.osc("server", "add", "floating", "ip", "vm1", fip)
    shown = cloud.json("server", "show", "vm1")
    assert fip in str(shown["addresses"]), shown["addresses"]

    r = ssh_until(tmp_path / "key", fip, "cat /root/hello; hostname",
                  expect=lambda r: r.returncode == 0 and "hello-from-user-data" in r.stdout)
    assert r.stdout.split() == ["hello-from-user-data", "vm1"], r.stdout
    console = cloud.osc("console", "log", "show", "vm1").stdout
    return server, console


def test_a_guest_you_can_use_configured_by_the_metadata_service(libvirtd, tmp_path):
    cloud = UpCloud()
    try:
        assert re.search(r"^\s+metadata\s+http://", cloud.log(), re.M), cloud.log()
        server, console = _a_usable_guest(cloud, tmp_path, "10.66.1.0/24")
        assert CONFIG_LINE.findall(console) == [("metadata", server["id"], "vm1", "1", "ran")], console[-2000:]
    finally:
        cloud.stop()


def test_a_guest_you_can_use_configured_by_its_config_drive_without_metadata_service(libvirtd, tmp_path):
    cloud = UpCloud({"NEFOS_ENABLED_APIS": "osapi_compute"})
    try:
        assert not re.search(r"^\s+metadata\s+http://", cloud.log(), re.M), cloud.log()
        with pytest.raises(ConnectionRefusedError):  # no metadata service listens on its port
            socket.create_connection(("127.0.0.1", int(cloud.env["NEFOS_METADATA_LISTEN_PORT"])), timeout=5)
        started = time.monotonic()
        server, console = _a_usable_guest(cloud, tmp_path, "10.66.2.0/24", "--config-drive", "true")
        assert CONFIG_LINE.findall(console) == [("config-drive", server["id"], "vm1", "1", "ran")], console[-2000:]
        assert time.monotonic() - started < 600
    finally:
        cloud.stop()
