"""Three compute hosts, each in its own network namespace, report over the bus and the database
reached through the underlay."""

from __future__ import annotations

from tests.multihost.conftest import FAKE_HOST, REAL_HOSTS


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
