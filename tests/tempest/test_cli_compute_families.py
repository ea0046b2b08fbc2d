"""The openstack CLI (and python-novaclient at 2.1) flows of the Compute API families beyond servers:
host aggregates and availability zones, usage, the migrations list, and the security-group proxy
older clients call. Each flow cleans up after itself: the Tempest run shares this cloud."""

from __future__ import annotations

import time

import openstack
import pytest
from novaclient import client as nova_client

from test_cli_acceptance import osc

pytestmark = pytest.mark.cli


def _wait_server(cloud, name, status, who="nefos-admin", timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        shown = osc(cloud, "server", "show", name, name=who)
        if shown["status"] == status and not shown.get("OS-EXT-STS:task_state"):
            return shown
        assert time.monotonic() < deadline, f"{name} is {shown['status']}/{shown.get('OS-EXT-STS:task_state')}"
        time.sleep(0.3)


def _compute_hosts(cloud) -> list[str]:
    services = osc(cloud, "compute", "service", "list", "--service", "nova-compute", name="nefos-admin")
    return sorted(s["Host"] for s in services if s["State"] == "up")


def test_aggregate_zone_steers_a_server(cloud):
    hosts = _compute_hosts(cloud)
    assert len(hosts) >= 2, hosts
    agg = osc(cloud, "aggregate", "create", "--zone", "cli-zone", "cli-aggregate", name="nefos-admin")
    try:
        assert agg["availability_zone"] == "cli-zone"
        shown = osc(cloud, "aggregate", "add", "host", "cli-aggregate", hosts[1], name="nefos-admin")
        assert hosts[1] in shown["hosts"]
        zones = {z["Zone Name"] for z in osc(cloud, "availability", "zone", "list", "--compute", name="nefos-admin")}
        assert "cli-zone" in zones, zones
        for _ in range(3):  # any of them would land on the other host were the zone not honoured
            osc(cloud, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--nic", "none",
                "--availability-zone", "cli-zone", "--wait", "cli-zoned", name="nefos-admin")
            server = osc(cloud, "server", "show", "cli-zoned", name="nefos-admin")
            assert server["OS-EXT-AZ:availability_zone"] == "cli-zone"
            assert server["OS-EXT-SRV-ATTR:host"] == hosts[1]
            # A host with servers on it cannot move to another zone, as Nova refuses it.
            r = osc(cloud, "aggregate", "set", "--zone", "elsewhere", "cli-aggregate", name="nefos-admin",
                    fmt=False, check=False)
            assert r.returncode != 0 and "400" in r.stderr, r.stderr
            osc(cloud, "server", "delete", "--wait", "cli-zoned", name="nefos-admin", fmt=False)
    finally:
        osc(cloud, "aggregate", "remove", "host", "cli-aggregate", hosts[1], name="nefos-admin", check=False)
        osc(cloud, "aggregate", "delete", "cli-aggregate", name="nefos-admin", fmt=False, check=False)
    assert "cli-aggregate" not in {a["Name"] for a in osc(cloud, "aggregate", "list", name="nefos-admin")}


def test_usage_and_migration_list(cloud):
    project = osc(cloud, "token", "issue", name="nefos-admin")["project_id"]
    osc(cloud, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--nic", "none",
        "--wait", "cli-usage", name="nefos-admin")
    try:
        server = osc(cloud, "server", "show", "cli-usage", name="nefos-admin")
        usage = osc(cloud, "usage", "list", name="nefos-admin")
        assert any(u["Project"] in (project, "admin") for u in usage), usage
        shown = osc(cloud, "usage", "show", "--project", project, name="nefos-admin")
        assert float(shown["RAM MB-Hours"]) > 0, shown
        assert server["id"] in {s["instance_id"] for s in shown["Servers"]}, shown  # JSON: the server usages
        # A cold migration (the fake hosts run it), confirmed, is listed with its statuses.
        osc(cloud, "server", "migrate", "--wait", "cli-usage", name="nefos-admin", fmt=False)
        _wait_server(cloud, "cli-usage", "VERIFY_RESIZE")
        osc(cloud, "server", "migrate", "confirm", "cli-usage", name="nefos-admin", fmt=False)
        _wait_server(cloud, "cli-usage", "ACTIVE")
        migrations = osc(cloud, "server", "migration", "list", "--server", server["id"], name="nefos-admin")
        assert [m["Status"] for m in migrations] == ["confirmed"], migrations
        assert migrations[0]["Source Compute"] == server["OS-EXT-SRV-ATTR:host"]
        assert migrations[0]["Dest Compute"] != server["OS-EXT-SRV-ATTR:host"]
    finally:
        osc(cloud, "server", "delete", "--wait", "cli-usage", name="nefos-admin", fmt=False, check=False)


def test_novaclient_security_groups_through_the_compute_proxy(cloud, monkeypatch):
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(cloud["clouds_file"]))
    conn = openstack.connect(cloud="nefos")
    nova = nova_client.Client("2.1", session=conn.session)
    group = conn.network.create_security_group(name="cli-proxy-group", description="via the proxy")
    net = conn.network.create_network(name="cli-proxy-net")
    conn.network.create_subnet(network_id=net.id, cidr="10.78.0.0/24", ip_version=4)
    server = conn.compute.create_server(name="cli-proxy-vm", image_id=conn.image.find_image("nefos-tiny").id,
                                        flavor_id=conn.compute.find_flavor("m1.tiny").id,
                                        networks=[{"uuid": net.id}])
    try:
        conn.compute.wait_for_server(server, wait=60)
        listed = nova.client.get("/os-security-groups")[1]["security_groups"]
        assert "cli-proxy-group" in {g["name"] for g in listed}
        nova.servers.add_security_group(server.id, "cli-proxy-group")
        names = {g.name for g in nova.servers.list_security_group(server.id)}
        assert "cli-proxy-group" in names, names
        nova.servers.remove_security_group(server.id, "cli-proxy-group")
        assert "cli-proxy-group" not in {g.name for g in nova.servers.list_security_group(server.id)}
        # From 2.36 the proxy is gone, as in Nova.
        nova_236 = nova_client.Client("2.36", session=conn.session)
        resp, _ = nova_236.client.get("/os-security-groups", raise_exc=False)
        assert resp.status_code == 404
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60)
        conn.network.delete_security_group(group)
        conn.network.delete_network(net)
