"""os-hosts (admin only, 404 from 2.43), on a running cloud with two fake hosts."""

from __future__ import annotations

import jsonschema

from nefos.control.compute.rest import response_schemas as responses
from tests.api.conftest import version
from tests.clouds import ADMIN, member


async def test_list_filters_by_zone_and_leaves_disabled_services_out(cloud):
    r = await cloud.compute.get("/v2.1/os-hosts")
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json(), responses.HOSTS)
    hosts = r.json()["hosts"]
    computes = [h for h in hosts if h["service"] == "compute"]
    assert {h["host_name"] for h in computes} == {"host-1", "host-2"}
    zone = computes[0]["zone"]
    assert (await cloud.compute.get(f"/v2.1/os-hosts?zone={zone}")).json()["hosts"] == computes
    assert (await cloud.compute.get("/v2.1/os-hosts?zone=")).json()["hosts"] == hosts
    assert (await cloud.compute.get("/v2.1/os-hosts?zone=nowhere")).json()["hosts"] == []
    internal = (await cloud.compute.get("/v2.1/os-hosts?zone=internal")).json()["hosts"]
    assert internal and all(h["service"] != "compute" for h in internal)
    r = await cloud.compute.put("/v2.1/os-hosts/host-2", json={"status": "Disable"})
    assert r.status_code == 200 and r.json() == {"host": "host-2", "status": "disabled"}, r.text
    names = {h["host_name"] for h in (await cloud.compute.get("/v2.1/os-hosts")).json()["hosts"]}
    assert "host-2" not in names and "host-1" in names
    svc = (await cloud.compute.get("/v2.1/os-services?host=host-2&binary=nova-compute")).json()["services"][0]
    assert svc["status"] == "disabled"
    r = await cloud.compute.put("/v2.1/os-hosts/host-2", json={"status": "enable"})
    assert r.json() == {"host": "host-2", "status": "enabled"}
    svc = (await cloud.compute.get("/v2.1/os-services?host=host-2&binary=nova-compute")).json()["services"][0]
    assert svc["status"] == "enabled"


async def test_show_sums_the_hosts_instances_per_project(cloud):
    net = await cloud.make_network(shared=True)
    a = (await cloud.boot(networks=[{"uuid": net["id"]}], flavor="1"))["server"]["id"]
    b = (await cloud.boot(networks=[{"uuid": net["id"]}], flavor="1", headers=member()))["server"]["id"]
    host_of = {}
    for sid in (a, b):
        host_of[sid] = (await cloud.wait_status(sid, "ACTIVE"))["OS-EXT-SRV-ATTR:host"]
    flavor = (await cloud.compute.get("/v2.1/flavors/1")).json()["flavor"]
    for host in ("host-1", "host-2"):
        r = await cloud.compute.get(f"/v2.1/os-hosts/{host}")
        assert r.status_code == 200, r.text
        jsonschema.validate(r.json(), responses.HOST_RESOURCES)
        rows = [row["resource"] for row in r.json()["host"]]
        assert [row["project"] for row in rows[:3]] == ["(total)", "(used_now)", "(used_max)"]
        assert all(row["host"] == host for row in rows)
        mine = [sid for sid, h in host_of.items() if h == host]
        assert rows[2]["cpu"] == len(mine) * flavor["vcpus"]
        assert rows[2]["memory_mb"] == len(mine) * flavor["ram"]
        assert rows[2]["disk_gb"] == len(mine) * (flavor["disk"] + flavor["OS-FLV-EXT-DATA:ephemeral"])
        projects = {row["project"]: row for row in rows[3:]}
        owners = set()
        for sid in mine:
            owners.add((await cloud.server(sid))["tenant_id"])
        assert set(projects) == owners
        hyp = (await cloud.compute.get("/v2.1/os-hypervisors/detail")).json()["hypervisors"]
        total = next(h for h in hyp if h["service"]["host"] == host)
        assert rows[0]["cpu"] == total["vcpus"] and rows[0]["memory_mb"] == total["memory_mb"]


async def test_errors_as_nova(cloud):
    assert (await cloud.compute.get("/v2.1/os-hosts/nowhere")).status_code == 404
    r = await cloud.compute.put("/v2.1/os-hosts/nowhere", json={"status": "enable"})
    assert r.status_code == 404, r.text
    for body in ({}, {"status": "on"}, {"maintenance_mode": "yes"}, {"status": "enable", "bogus": 1}):
        r = await cloud.compute.put("/v2.1/os-hosts/host-1", json=body)
        assert r.status_code == 400 and "badRequest" in r.json(), (body, r.text)
    r = await cloud.compute.put("/v2.1/os-hosts/host-1", json={"maintenance_mode": "enable"})
    assert r.status_code == 501 and r.json()["notImplemented"]["code"] == 501, r.text
    for action in ("startup", "shutdown", "reboot"):
        assert (await cloud.compute.get(f"/v2.1/os-hosts/host-1/{action}")).status_code == 501
        assert (await cloud.compute.get(f"/v2.1/os-hosts/nowhere/{action}")).status_code == 404
        assert (await cloud.compute.get(f"/v2.1/os-hosts/host-1/{action}", headers=member())).status_code == 403
    for method, path, body in (("GET", "/v2.1/os-hosts", None), ("GET", "/v2.1/os-hosts/host-1", None),
                               ("PUT", "/v2.1/os-hosts/host-1", {"status": "disable"})):
        r = await cloud.compute.request(method, path, json=body, headers=member())
        assert r.status_code == 403, r.text
        r = await cloud.compute.request(method, path, json=body, headers=version("2.43", ADMIN))
        assert r.status_code == 404, r.text
        r = await cloud.compute.request(method, path, json=body, headers=version("2.42", ADMIN))
        assert r.status_code == 200, r.text
    await cloud.compute.put("/v2.1/os-hosts/host-1", json={"status": "enable"})
