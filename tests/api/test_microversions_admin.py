"""Microversions 2.48 .. 2.88 of the non-server resources, against Tempest's schema for each version:
services and hypervisors by uuid (2.53), flavor descriptions and PUT (2.55), flavor extra specs in views
(2.61), server group policy and rules (2.64), strict query strings (2.53, 2.75), hypervisor views without
resource figures (2.88)."""

from __future__ import annotations

import copy

import pytest

from nefos.control.compute.rest.microversion import MAX, APIVersion
from tests.api.conftest import member, version
from tests.api.test_services_hypervisors import hosts  # noqa: F401 (fixture)
from tests.schemas import assert_schema, resolve


def upto_max(*versions: str) -> list[str]:
    """The versions Nefos honours (a version above its maximum answers 406)."""
    return [v for v in versions if not MAX < APIVersion.parse(v)]


async def test_services_by_uuid_v253(client, hosts):  # noqa: F811
    h = version("2.53")
    r = await client.get("/v2.1/os-services", params={"binary": "nova-compute"}, headers=h)
    services = assert_schema("services.list_services", r)["services"]
    by_host = {s["host"]: s for s in services}
    sid = by_host["host-1"]["id"]
    r = await client.put(f"/v2.1/os-services/{sid}", json={"status": "disabled", "disabled_reason": "maint"},
                         headers=h)
    svc = assert_schema("services.update_service", r)["service"]
    assert (svc["id"], svc["status"], svc["disabled_reason"], svc["forced_down"]) == (sid, "disabled", "maint",
                                                                                      False)
    r = await client.put(f"/v2.1/os-services/{sid}", json={"status": "enabled", "forced_down": True}, headers=h)
    svc = assert_schema("services.update_service", r)["service"]
    assert (svc["status"], svc["disabled_reason"], svc["forced_down"], svc["state"]) == ("enabled", None, True,
                                                                                         "down")
    r = await client.put(f"/v2.1/os-services/{sid}", json={"status": "enabled", "disabled_reason": "x"}, headers=h)
    assert r.status_code == 400
    r = await client.put(f"/v2.1/os-services/{sid}", json={}, headers=h)
    assert r.status_code == 400 and "No updates were requested" in r.json()["badRequest"]["message"]
    r = await client.put("/v2.1/os-services/disable", json={"host": "host-1", "binary": "nova-compute"}, headers=h)
    assert r.status_code == 400  # the old actions are not routes any more: 'disable' is not a uuid
    r = await client.put("/v2.1/os-services/00000000-0000-0000-0000-000000000000", json={"status": "enabled"},
                         headers=h)
    assert r.status_code == 404
    scheduler = next(s for s in (await client.get("/v2.1/os-services", headers=h)).json()["services"]
                     if s["binary"] == "nova-scheduler")
    r = await client.put(f"/v2.1/os-services/{scheduler['id']}", json={"status": "disabled"}, headers=h)
    assert r.status_code == 400 and "nova-scheduler" in r.json()["badRequest"]["message"]
    r = await client.put(f"/v2.1/os-services/{sid}", json={"status": "enabled"}, headers=version("2.53", member()))
    assert r.status_code == 403
    # 2.75: the list refuses unknown query parameters (2.74 ignores them).
    assert (await client.get("/v2.1/os-services", params={"bogus": 1}, headers=version("2.74"))).status_code == 200
    r = await client.get("/v2.1/os-services", params={"bogus": 1}, headers=version("2.75"))
    assert r.status_code == 400 and "bogus" in r.json()["badRequest"]["message"]


_V288_REMOVED = ("current_workload", "cpu_info", "vcpus", "vcpus_used", "free_disk_gb", "local_gb", "local_gb_used",
                 "disk_available_least", "free_ram_mb", "memory_mb", "memory_mb_used", "running_vms")


def _hypervisor_schema(name: str, mv: str) -> dict:
    """Tempest's schema, or from 2.88 (which Tempest has none of) Nova's detail_response_v288 /
    show_response_v288: the resource fields gone, ``uptime`` (string or null) required."""
    schema = copy.deepcopy(resolve(f"hypervisors.{name}", mv))
    if APIVersion.parse(mv) < APIVersion.parse("2.88"):
        return schema
    props = schema["response_body"]["properties"]
    item = props["hypervisor"] if "hypervisor" in props else props["hypervisors"]["items"]
    for field in _V288_REMOVED:
        item["properties"].pop(field, None)
        if field in item.get("required", []):
            item["required"].remove(field)
    item["properties"]["uptime"] = {"type": ["string", "null"]}
    item.setdefault("required", []).append("uptime")
    return schema


@pytest.mark.parametrize("mv", upto_max("2.53", "2.75", "2.88"))
async def test_hypervisors_by_uuid(client, rt, hosts, mv):  # noqa: F811
    import uuid as uuidlib

    from nefos.db.models import Instance
    async with rt.db.transaction() as s:
        s.add(Instance(uuid=str(uuidlib.uuid4()), display_name="vm1", host="host-1", node="host-1.example",
                       vm_state="active"))
    h = version(mv)
    r = await client.get("/v2.1/os-hypervisors", params={"with_servers": "true"}, headers=h)
    hyps = assert_schema("hypervisors.list_search_hypervisors", r)["hypervisors"]
    assert [len(x.get("servers", [])) for x in hyps] == [1, 0]
    assert ("servers" in hyps[1]) == (mv != "2.53")  # 2.75: always there when asked for
    r = await client.get("/v2.1/os-hypervisors/detail", params={"hypervisor_hostname_pattern": "host-2"},
                         headers=h)
    detail = assert_schema(_hypervisor_schema("list_hypervisors_detail", mv), r)["hypervisors"]
    assert [x["hypervisor_hostname"] for x in detail] == ["host-2.example"]
    assert ("cpu_info" in detail[0], "uptime" in detail[0]) == ((False, True) if mv == "2.88" else (True, False))
    r = await client.get(f"/v2.1/os-hypervisors/{hyps[0]['id']}", params={"with_servers": "1"}, headers=h)
    shown = assert_schema(_hypervisor_schema("get_hypervisor", mv), r)["hypervisor"]
    assert shown["servers"][0]["name"] == "vm1" and shown["id"] == hyps[0]["id"]
    assert (await client.get("/v2.1/os-hypervisors/1", headers=h)).status_code == 400  # not a uuid
    r = await client.get("/v2.1/os-hypervisors/00000000-0000-0000-0000-000000000000", headers=h)
    assert r.status_code == 404
    assert (await client.get("/v2.1/os-hypervisors/host-1/search", headers=h)).status_code == 404
    assert (await client.get("/v2.1/os-hypervisors/host-1/servers", headers=h)).status_code == 404
    r = await client.get("/v2.1/os-hypervisors", params={"hypervisor_hostname_pattern": "x", "limit": 1}, headers=h)
    assert r.status_code == 400
    assert (await client.get("/v2.1/os-hypervisors", params={"bogus": 1}, headers=h)).status_code == 400
    r = await client.get("/v2.1/os-hypervisors", params={"limit": 1}, headers=h)
    body = assert_schema("hypervisors.list_search_hypervisors", r)
    r = await client.get("/v2.1/os-hypervisors", params={"marker": body["hypervisors"][0]["id"]}, headers=h)
    assert [x["hypervisor_hostname"] for x in r.json()["hypervisors"]] == ["host-2.example"]
    uptime = await client.get(f"/v2.1/os-hypervisors/{hyps[0]['id']}/uptime", headers=h)
    stats = await client.get("/v2.1/os-hypervisors/statistics", headers=h)
    if mv == "2.88":
        assert (uptime.status_code, stats.status_code) == (404, 404)
    else:
        assert_schema("hypervisors.get_hypervisor_uptime", uptime)
        assert_schema("hypervisors.get_hypervisor_statistics", stats)


async def test_flavor_description_and_update_v255(client):
    h = version("2.55")
    body = {"name": "described", "ram": 256, "vcpus": 1, "disk": 1, "id": "d1", "description": "for tests"}
    r = await client.post("/v2.1/flavors", json={"flavor": body}, headers=version("2.54"))
    assert r.status_code == 400  # no description before 2.55
    r = await client.post("/v2.1/flavors", json={"flavor": body}, headers=h)
    assert assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]["description"] == "for tests"
    r = await client.put("/v2.1/flavors/d1", json={"flavor": {"description": "changed"}}, headers=h)
    flavor = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert flavor["description"] == "changed" and "extra_specs" not in flavor
    r = await client.get("/v2.1/flavors", headers=h)
    listed = assert_schema("flavors.list_flavors", r)["flavors"]
    assert next(f for f in listed if f["id"] == "d1")["description"] == "changed"
    assert (await client.put("/v2.1/flavors/d1", json={"flavor": {"description": "x"}},
                             headers=version("2.54"))).status_code == 404
    assert (await client.put("/v2.1/flavors/d1", json={"flavor": {"name": "x"}}, headers=h)).status_code == 400
    assert (await client.put("/v2.1/flavors/d1", json={"flavor": {"description": "x"}},
                             headers=version("2.55", member()))).status_code == 403
    assert (await client.put("/v2.1/flavors/nope", json={"flavor": {"description": None}},
                             headers=h)).status_code == 404


@pytest.mark.parametrize("mv", ["2.61", "2.75"])
async def test_flavor_extra_specs_in_views_v261(client, mv):
    h = version(mv)
    await client.post("/v2.1/flavors/1/os-extra_specs", json={"extra_specs": {"hw:cpu_policy": "shared"}})
    r = await client.get("/v2.1/flavors/1", headers=h)
    flavor = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert flavor["extra_specs"] == {"hw:cpu_policy": "shared"}
    assert flavor["swap"] == (0 if mv == "2.75" else "")
    r = await client.get("/v2.1/flavors/detail", headers=version(mv, member()))
    flavors = assert_schema("flavors.list_flavors_details", r)["flavors"]
    assert next(f for f in flavors if f["id"] == "1")["extra_specs"] == {"hw:cpu_policy": "shared"}
    r = await client.put("/v2.1/flavors/1", json={"flavor": {"description": "d"}}, headers=h)
    assert assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]["extra_specs"]
    r = await client.post("/v2.1/flavors", json={"flavor": {"name": "n", "ram": 1, "vcpus": 1, "disk": 0}},
                          headers=h)
    assert assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]["extra_specs"] == {}
    r = await client.get("/v2.1/flavors", params={"bogus": 1}, headers=h)
    assert r.status_code == (400 if mv == "2.75" else 200)


async def test_server_group_policy_and_rules_v264(client):
    h = version("2.64", member())
    r = await client.post("/v2.1/os-server-groups", json={"server_group": {
        "name": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": 2}}}, headers=h)
    group = assert_schema("server_groups.create_show_server_group", r)["server_group"]
    assert (group["policy"], group["rules"]) == ("anti-affinity", {"max_server_per_host": 2})
    assert "policies" not in group and "metadata" not in group
    r = await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=h)
    assert assert_schema("server_groups.create_show_server_group", r)["server_group"]["rules"] == {
        "max_server_per_host": 2}
    r = await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=version("2.63", member()))
    assert assert_schema("server_groups.create_show_server_group", r)["server_group"]["policies"] == [
        "anti-affinity"]
    r = await client.post("/v2.1/os-server-groups", json={"server_group": {
        "name": "g", "policy": "affinity", "rules": {"max_server_per_host": 2}}}, headers=h)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Only anti-affinity policy supports rules."
    for bad in ({"name": "g", "policies": ["affinity"]}, {"name": "g", "policy": "x"},
                {"name": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": 0}}):
        r = await client.post("/v2.1/os-server-groups", json={"server_group": bad}, headers=h)
        assert r.status_code == 400, bad
    r = await client.post("/v2.1/os-server-groups", json={"server_group": {"name": "s", "policy": "soft-affinity"}},
                          headers=h)
    assert assert_schema("server_groups.create_show_server_group", r)["server_group"]["rules"] == {}
    r = await client.get("/v2.1/os-server-groups", headers=h)
    assert len(assert_schema("server_groups.list_server_groups", r)["server_groups"]) == 2
    r = await client.get("/v2.1/os-server-groups", params={"bogus": 1}, headers=version("2.75", member()))
    assert r.status_code == 400


def test_max_server_per_host_in_the_scheduler_filter():
    from types import SimpleNamespace

    from nefos.control.scheduler.filters import server_group_filter
    host = SimpleNamespace(host="h1")
    group = {"policy": "anti-affinity", "hosts": ["h1"], "rules": {}}
    assert not server_group_filter(host, {"instance_group": group})
    group["rules"] = {"max_server_per_host": 2}
    assert server_group_filter(host, {"instance_group": group})
    group["hosts"] = ["h1", "h1"]
    assert not server_group_filter(host, {"instance_group": group})


@pytest.mark.parametrize("path", ["/v2.1/limits", "/v2.1/os-keypairs", "/v2.1/os-quota-sets/p"])
async def test_strict_query_v275(client, path):
    assert (await client.get(path, params={"bogus": 1}, headers=version("2.74"))).status_code == 200
    r = await client.get(path, params={"bogus": 1}, headers=version("2.75"))
    assert r.status_code == 400, r.text
    assert r.json()["badRequest"]["message"] == "Additional properties are not allowed ('bogus' was unexpected)"


@pytest.mark.parametrize("headers,status", [
    ({"OpenStack-API-Version": "compute 3.0"}, 406),
    ({"OpenStack-API-Version": "compute 2.0"}, 406),
    ({"X-OpenStack-Nova-API-Version": "9.9"}, 406),
    ({"OpenStack-API-Version": "compute two"}, 400),
])
async def test_refused_versions_answer_with_request_ids(client, headers, status):
    """A version outside the range (or no version at all) is refused before routing, and the
    answer still carries the request ids every Compute API response has."""
    r = await client.get("/v2.1/flavors", headers=headers)
    assert r.status_code == status, r.text
    fault = "computeFault" if status == 406 else "badRequest"  # Nova names no fault for 406
    assert r.json()[fault]["code"] == status and r.json()[fault]["message"]
    assert r.headers["x-openstack-request-id"].startswith("req-")
    assert r.headers["x-compute-request-id"] == r.headers["x-openstack-request-id"]
