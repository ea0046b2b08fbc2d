"""A real guest booted with the unmodified `openstack` CLI against `nefos up --driver libvirt`: its
port goes ACTIVE through the real L2 agent, its console shows the port's address obtained by DHCP,
and the host reaches it from the network's DHCP namespace (on the bridge)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from tests.libvirt.conftest import qemu_reachable_dir, remove_domains_under, virsh
from tests.deployment.test_openstack_clients import run_json, run_openstack
from tests.isolation.helpers import start_nefos, stop_nefos

pytestmark = [pytest.mark.libvirt, pytest.mark.cli]


def test_real_guest_through_the_openstack_cli(libvirtd):
    # The shipped layout: instances under a state dir closed to everyone (0700), which the driver
    # opens to QEMU's group alone (the test's top directory is what an operator would open).
    top = qemu_reachable_dir("nefos-up-")
    state = top / "up"
    state.mkdir(mode=0o700)
    proc, _clouds = start_nefos(state, {"NEFOS_PASSWORD_HASH_ROUNDS": "12",
                                        "NEFOS_SYNC_POWER_STATE_INTERVAL": "-1"}, driver="libvirt")
    up = {"env": {"PATH": "/usr/bin:/bin", "HOME": str(state)}, "clouds": state / "clouds.yaml"}
    net = None
    try:
        assert "compute driver: libvirt" in (state / "nefos-up.log").read_text()
        net = run_json(up, "network", "create", "cli-real-net")
        run_openstack(up, "subnet", "create", "--network", "cli-real-net", "--subnet-range", "10.86.0.0/24",
                      "cli-real-subnet")
        run_openstack(up, "security", "group", "rule", "create", "--protocol", "icmp", "--ingress", "default")
        server = run_json(up, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--network",
                          "cli-real-net", "--wait", "cli-real-vm")
        assert server["status"] == "ACTIVE"
        (port,) = run_json(up, "port", "list", "--server", server["id"], "--long")
        assert port["Status"] == "ACTIVE"
        ip = re.search(r"10\.86\.0\.[0-9]+", json.dumps(port["Fixed IP Addresses"])).group(0)
        assert "running" in virsh("domstate", server["id"])
        assert oct(state.stat().st_mode & 0o777) == "0o710"  # QEMU's group passes through, no one lists
        deadline = time.monotonic() + 120
        while f"NEFOS-IP: {ip}/24" not in (log := run_openstack(up, "console", "log", "show", "cli-real-vm").stdout):
            assert time.monotonic() < deadline, log[-2000:]
            time.sleep(1)
        ns = f"qdhcp-{net['id']}"
        deadline = time.monotonic() + 30
        while subprocess.run(["ip", "netns", "exec", ns, "busybox", "ping", "-c", "1", "-W", "1", ip],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, f"{ip} does not answer ping from {ns}"
        run_openstack(up, "server", "delete", "--wait", "cli-real-vm")
        assert server["id"] not in virsh("list", "--all", "--uuid")
    finally:
        try:
            stop_nefos(proc, state)
        finally:
            remove_domains_under(state)  # a failed run's guest must not outlive the test
            shutil.rmtree(top, ignore_errors=True)
        if net is not None:
            subprocess.run(["ip", "link", "del", "brq" + net["id"][:11]], capture_output=True)
