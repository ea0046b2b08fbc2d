"""``/v2.1/os-aggregates`` and the availability zones aggregates give hosts (Nova's behaviour)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import insert

from nefos.control.compute.services import COMPUTE_BINARY
from nefos.db.models import ComputeNode, Instance
from nefos.service import Service
from tests.api.conftest import member, version
from tests.schemas import assert_schema

AGG = "/v2.1/os-aggregates"


@pytest.fixture
async def hosts(rt):
    for binary, topic, host in ((COMPUTE_BINARY, "compute", "host-1"), (COMPUTE_BINARY, "compute", "host-2"),
                                ("nova-conductor", "conductor", "controller")):
        await Service(rt, binary, topic, host).register()
    async with rt.db.transaction() as s:
        for host in ("host-1", "host-2"):
            s.add(ComputeNode(uuid=str(uuid.uuid4()), host=host, hypervisor_hostname=f"{host}.example",
                              vcpus=8, memory_mb=8192, local_gb=100))
    return ["host-1", "host-2"]


async def _create(client, name="agg1", zone=None, headers=None) -> dict:
    body = {"name": name} if zone is None else {"name": name, "availability_zone": zone}
    r = await client.post(AGG, json={"aggregate": body}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["aggregate"]


async def _action(client, agg_id, name, args, headers=None):
    return await client.post(f"{AGG}/{agg_id}/action", json={name: args}, headers=headers)


async def _instance_on(rt, host: str) -> None:
    async with rt.db.transaction() as s:
        await s.execute(insert(Instance).values(uuid=str(uuid.uuid4()), host=host, project_id="p",
                                                vm_state="active"))


async def test_create_show_list_update_delete(client, hosts):
    r = await client.post(AGG, json={"aggregate": {"name": "agg1", "availability_zone": "z1"}})
    created = assert_schema("aggregates.create_aggregate", r)["aggregate"]
    assert created["name"] == "agg1" and created["availability_zone"] == "z1" and "uuid" not in created
    assert created["deleted"] is False and created["deleted_at"] is None and created["updated_at"] is None
    r = await client.get(f"{AGG}/{created['id']}")
    shown = assert_schema("aggregates.get_aggregate", r)["aggregate"]
    assert shown["hosts"] == [] and shown["metadata"] == {"availability_zone": "z1"}
    r = await client.get(f"{AGG}/{created['id']}", headers=version("2.41"))
    assert uuid.UUID(assert_schema("v2_41.aggregates.get_aggregate", r)["aggregate"]["uuid"])
    r = await client.get(AGG, headers=version("2.41"))
    listed = assert_schema("v2_41.aggregates.list_aggregates", r)["aggregates"]
    assert [a["name"] for a in listed] == ["agg1"]
    r = await client.put(f"{AGG}/{created['id']}", json={"aggregate": {"name": " renamed "}})
    updated = assert_schema("aggregates.update_aggregate", r)["aggregate"]
    assert updated["name"] == "renamed" and updated["availability_zone"] == "z1"
    r = await client.put(f"{AGG}/{created['id']}", json={"aggregate": {"availability_zone": "z2"}})
    assert r.json()["aggregate"]["metadata"] == {"availability_zone": "z2"}
    r = await client.delete(f"{AGG}/{created['id']}")
    assert r.status_code == 200 and r.content == b""
    assert (await client.get(f"{AGG}/{created['id']}")).status_code == 404


async def test_names_and_errors(client, hosts):
    agg = await _create(client, "agg1")
    r = await client.post(AGG, json={"aggregate": {"name": "agg1"}})
    assert r.status_code == 409 and r.json()["conflictingRequest"]["message"] == "Aggregate agg1 already exists."
    other = await _create(client, "agg2")
    r = await client.put(f"{AGG}/{other['id']}", json={"aggregate": {"name": "agg1"}})
    assert r.status_code == 409
    for bad in ({"name": ""}, {"name": "x" * 256}, {"name": " lead"}, {"name": "a", "availability_zone": "a:b"},
                {"name": "a", "availability_zone": ""}, {"name": "a", "other": 1}, {}):
        r = await client.post(AGG, json={"aggregate": bad})
        assert r.status_code == 400 and "badRequest" in r.json(), (bad, r.text)
    r = await client.put(f"{AGG}/{agg['id']}", json={"aggregate": {}})
    assert r.status_code == 400
    for path in (f"{AGG}/abc", f"{AGG}/1.5"):
        assert (await client.get(path)).status_code == 400
        assert (await client.delete(path)).status_code == 400
    for ident in ("99999", "99999999999999999999", "-1"):
        r = await client.get(f"{AGG}/{ident}")
        assert r.status_code == 404 and "itemNotFound" in r.json(), r.text
    r = await client.put(f"{AGG}/{agg['id']}", json={"aggregate": {"availability_zone": None}})
    assert r.status_code == 400 and "does not support empty named availability zone" in r.text


async def test_hosts_and_metadata(client, rt, hosts):
    agg = await _create(client, "agg1", "z1")
    r = await _action(client, agg["id"], "add_host", {"host": "host-1"})
    assert assert_schema("aggregates.aggregate_add_remove_host", r)["aggregate"]["hosts"] == ["host-1"]
    r = await _action(client, agg["id"], "add_host", {"host": "host-1"})
    assert r.status_code == 409, r.text
    r = await _action(client, agg["id"], "add_host", {"host": "no-such-host"})
    assert r.status_code == 404 and "Compute host no-such-host could not be found." in r.text
    r = await _action(client, agg["id"], "add_host", {"host": "controller"})  # not a compute host
    assert r.status_code == 404
    r = await _action(client, 99999, "add_host", {"host": "host-1"})
    assert r.status_code == 404 and "Aggregate 99999 could not be found." in r.text
    r = await client.delete(f"{AGG}/{agg['id']}")
    assert r.status_code == 400 and "Host aggregate is not empty" in r.text
    r = await _action(client, agg["id"], "set_metadata", {"metadata": {"ssd": "true", "k": "v"}})
    assert assert_schema("aggregates.aggregate_set_metadata", r)["aggregate"]["metadata"] == {
        "availability_zone": "z1", "ssd": "true", "k": "v"}
    r = await _action(client, agg["id"], "set_metadata", {"metadata": {"k": None, "missing": None}})
    assert r.json()["aggregate"]["metadata"] == {"availability_zone": "z1", "ssd": "true"}
    r = await _action(client, agg["id"], "remove_host", {"host": "host-2"})
    assert r.status_code == 404 and r.json()["itemNotFound"]["message"] == (
        f"Cannot remove host host-2 in aggregate {agg['id']}")
    r = await _action(client, agg["id"], "remove_host", {"host": "host-1"})
    assert r.status_code == 200 and r.json()["aggregate"]["hosts"] == []
    r = await _action(client, agg["id"], "no_such", {})
    assert r.status_code == 400 and "There is no such action: no_such" in r.text
    for body in ({"add_host": {}}, {"add_host": {"host": "a/b"}}, {"set_metadata": {"metadata": {"bad/key": "v"}}},
                 {"set_metadata": {"metadata": {"k": "v" * 256}}}, {"add_host": {"host": "h"}, "remove_host": {}}):
        r = await client.post(f"{AGG}/{agg['id']}/action", json=body)
        assert r.status_code == 400, (body, r.text)
    await client.delete(f"{AGG}/{agg['id']}")


async def test_zones_come_from_aggregates(client, rt, hosts):
    agg = await _create(client, "agg1", "z1")
    await _action(client, agg["id"], "add_host", {"host": "host-1"})
    r = await client.get("/v2.1/os-availability-zone", headers=member())
    zones = assert_schema("availability_zone.list_availability_zone_list", r)["availabilityZoneInfo"]
    assert sorted(z["zoneName"] for z in zones) == ["nova", "z1"]
    r = await client.get("/v2.1/os-availability-zone/detail")
    by_name = {z["zoneName"]: z for z in r.json()["availabilityZoneInfo"]}
    assert set(by_name["z1"]["hosts"]) == {"host-1"} and set(by_name["nova"]["hosts"]) == {"host-2"}
    services = (await client.get("/v2.1/os-services", params={"binary": COMPUTE_BINARY})).json()["services"]
    assert {s["host"]: s["zone"] for s in services} == {"host-1": "z1", "host-2": "nova"}
    # A zone of an aggregate without hosts is not listed, as in Nova.
    await _create(client, "empty", "z-empty")
    r = await client.get("/v2.1/os-availability-zone")
    assert "z-empty" not in {z["zoneName"] for z in r.json()["availabilityZoneInfo"]}


async def test_a_host_is_in_one_zone(client, rt, hosts):
    a = await _create(client, "a", "z1")
    b = await _create(client, "b", "z2")
    plain = await _create(client, "plain")
    await _action(client, a["id"], "add_host", {"host": "host-1"})
    r = await _action(client, b["id"], "add_host", {"host": "host-1"})
    assert r.status_code == 409 and "One or more hosts already in availability zone(s) ['z1']" in r.text
    assert (await _action(client, plain["id"], "add_host", {"host": "host-1"})).status_code == 200
    # A zone given to an aggregate whose host is already in another zone is refused too (400).
    r = await client.put(f"{AGG}/{plain['id']}", json={"aggregate": {"availability_zone": "z3"}})
    assert r.status_code == 400 and "already in availability zone" in r.text
    r = await _action(client, plain["id"], "set_metadata", {"metadata": {"availability_zone": "z3"}})
    assert r.status_code == 400
    r = await client.get(f"{AGG}/{plain['id']}")
    assert r.json()["aggregate"]["metadata"] == {}  # nothing half-written


async def test_hosts_with_instances_do_not_change_zone(client, rt, hosts):
    await _instance_on(rt, "host-1")
    zoned = await _create(client, "zoned", "z1")
    r = await _action(client, zoned["id"], "add_host", {"host": "host-1"})
    assert r.status_code == 409 and "would change from 'None' to 'z1'" in r.text
    plain = await _create(client, "plain")
    assert (await _action(client, plain["id"], "add_host", {"host": "host-1"})).status_code == 200
    r = await client.put(f"{AGG}/{plain['id']}", json={"aggregate": {"availability_zone": "z1"}})
    assert r.status_code == 400 and "One or more hosts contain instances in this zone" in r.text
    r = await _action(client, plain["id"], "set_metadata", {"metadata": {"availability_zone": "z1"}})
    assert r.status_code == 400
    # A host without instances moves freely; once it has some, it cannot leave its zone.
    assert (await _action(client, zoned["id"], "add_host", {"host": "host-2"})).status_code == 200
    await _instance_on(rt, "host-2")
    r = await _action(client, zoned["id"], "remove_host", {"host": "host-2"})
    assert r.status_code == 409 and "would change from 'z1' to 'None'" in r.text
    r = await client.put(f"{AGG}/{zoned['id']}", json={"aggregate": {"availability_zone": "z9"}})
    assert r.status_code == 400
    r = await client.put(f"{AGG}/{zoned['id']}", json={"aggregate": {"availability_zone": "z1", "name": "same"}})
    assert r.status_code == 200  # the same zone: nothing moves


async def test_admin_only(client, hosts):
    agg = await _create(client, "agg1")
    calls = [("get", AGG, None), ("post", AGG, {"aggregate": {"name": "x"}}), ("get", f"{AGG}/{agg['id']}", None),
             ("put", f"{AGG}/{agg['id']}", {"aggregate": {"name": "y"}}), ("delete", f"{AGG}/{agg['id']}", None),
             ("post", f"{AGG}/{agg['id']}/action", {"add_host": {"host": "host-1"}}),
             ("post", f"{AGG}/{agg['id']}/action", {"remove_host": {"host": "host-1"}}),
             ("post", f"{AGG}/{agg['id']}/action", {"set_metadata": {"metadata": {"a": "b"}}})]
    for method, path, body in calls:
        kwargs = {"json": body} if body is not None else {}
        r = await client.request(method, path, headers=member(), **kwargs)
        assert r.status_code == 403, (method, path, r.text)
    r = await client.post(f"{AGG}/{agg['id']}/images", json={"cache": [{"id": str(uuid.uuid4())}]},
                          headers=version("2.81", member()))
    assert r.status_code == 403


async def test_cache_images(client, hosts):
    agg = await _create(client, "agg1")
    image = str(uuid.uuid4())
    body = {"cache": [{"id": image}]}
    r = await client.post(f"{AGG}/{agg['id']}/images", json=body, headers=version("2.80"))
    assert r.status_code == 404
    r = await client.post(f"{AGG}/{agg['id']}/images", json=body, headers=version("2.81"))
    assert r.status_code == 202 and r.content == b""
    r = await client.post(f"{AGG}/{agg['id']}/images", json={"cache": [{"id": image}, {"id": image}]},
                          headers=version("2.81"))
    assert r.status_code == 400 and "Duplicate images in request" in r.text
    for bad in ({"cache": []}, {"cache": [{"id": "not-a-uuid"}]}, {"cache": [{}]}, {}):
        r = await client.post(f"{AGG}/{agg['id']}/images", json=bad, headers=version("2.81"))
        assert r.status_code == 400, (bad, r.text)
    r = await client.post(f"{AGG}/99999/images", json=body, headers=version("2.81"))
    assert r.status_code == 404
