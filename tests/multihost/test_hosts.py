"""Three compute hosts, each in its own network namespace with no database, report over the bus
through the underlay (their heartbeats and nodes reach the database through the conductor;
test_boot.py shows each serving its own topic too: builds are cast to it, console output is asked
of it)."""

from __future__ import annotations

import pytest

from tests.multihost.conftest import FAKE_HOST, REAL_HOSTS

pytestmark = [pytest.mark.libvirt, pytest.mark.postgres, pytest.mark.rabbit]


def test_every_host_reports_from_its_own_namespace(multihost):
    services = multihost.compute_services()
    assert set(services) == {*REAL_HOSTS, FAKE_HOST}
    assert all(s["state"] == "up" and s["status"] == "enabled" for s in services.values()), services
    nodes = multihost.compute.get("/v2.1/os-hypervisors/detail").json()["hypervisors"]
    by_host = {n["service"]["host"]: n for n in nodes}
    assert {by_host[h]["hypervisor_type"] for h in REAL_HOSTS} == {"QEMU"}, by_host
    # Each host's processes see only its namespace: lo and its underlay link, its own address.
    for name, host in multihost.hosts.items():
        out = multihost.in_namespace(name, "ip", "-4", "-o", "addr").stdout
        assert f"inet {host.address}/" in out and multihost.underlay.gateway not in out, out
