"""/v2.1/os-services, /v2.1/os-hypervisors, /v2.1/os-availability-zone over registered services."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from sqlalchemy import update

from nefos.control.compute.services import is_up
from nefos.db.models import ComputeNode, Instance, Service as ServiceRow, utcnow
from nefos.service import Service
from tests.api.conftest import member, version
from tests.schemas import assert_schema


@pytest.fixture
async def hosts(rt):
    """Two compute hosts (each with one node), a conductor and a scheduler."""
    ids = {}
    for binary, topic, host in (("nova-compute", "compute", "host-1"), ("nova-compute", "compute", "host-2"),
                                ("nova-conductor", "conductor", "controller"),
                                ("nova-scheduler", "scheduler", "controller")):
        ids[(host, binary)] = await Service(rt, binary, topic, host).register()
    async with rt.db.transaction() as s:
        for i, host in enumerate(("host-1", "host-2")):
            s.add(ComputeNode(uuid=str(uuid.uuid4()), host=host, hypervisor_hostname=f"{host}.example",
                              hypervisor_type="fake", hypervisor_version=1000, host_ip=f"192.0.2.{i + 1}",
                              vcpus=32, memory_mb=131072, local_gb=2048, vcpus_used=2 * i,
                              memory_mb_used=1024 * i, local_gb_used=10 * i, running_vms=i))
    return ids


async def test_is_up(rt, hosts):
    async with rt.db.reader() as s:
        from sqlalchemy import select
        row = (await s.execute(select(ServiceRow).where(ServiceRow.host == "host-1"))).scalar_one()
    assert is_up(row, rt.cfg)
    assert is_up(row.to_dict(), rt.cfg)
    assert not is_up({**row.to_dict(), "forced_down": True}, rt.cfg)
    stale = utcnow() - dt.timedelta(seconds=rt.cfg.service_down_time + 5)
    assert not is_up({**row.to_dict(), "last_seen_up": stale}, rt.cfg)
    assert is_up({**row.to_dict(), "last_seen_up": stale.isoformat()}, rt.cfg.model_copy(
        update={"service_down_time": 3600}))


async def test_services_list_and_filters(client, rt, hosts):
    r = await client.get("/v2.1/os-services")
    services = assert_schema("services.list_services", r)["services"]
    assert {(s["host"], s["binary"], s["zone"], s["state"], s["status"]) for s in services} == {
        ("host-1", "nova-compute", "nova", "up", "enabled"), ("host-2", "nova-compute", "nova", "up", "enabled"),
        ("controller", "nova-conductor", "internal", "up", "enabled"),
        ("controller", "nova-scheduler", "internal", "up", "enabled")}
    r = await client.get("/v2.1/os-services", params={"binary": "nova-compute", "host": "host-2"},
                         headers=version("2.11"))
    services = assert_schema("services.list_services", r)["services"]
    assert [(s["host"], s["forced_down"]) for s in services] == [("host-2", False)]
    r = await client.get("/v2.1/os-services", headers=member())
    assert r.status_code == 403 and "os-services" in r.json()["forbidden"]["message"]


async def test_enable_disable_force_down(client, rt, hosts):
    r = await client.put("/v2.1/os-services/disable-log-reason",
                         json={"host": "host-1", "binary": "nova-compute", "disabled_reason": "maintenance"})
    assert assert_schema("services.disable_log_reason", r)["service"] == {
        "host": "host-1", "binary": "nova-compute", "status": "disabled", "disabled_reason": "maintenance"}
    r = await client.get("/v2.1/os-services", params={"host": "host-1"})
    svc = r.json()["services"][0]
    assert (svc["status"], svc["disabled_reason"]) == ("disabled", "maintenance")
    async with rt.db.reader() as s:
        from sqlalchemy import select
        row = (await s.execute(select(ServiceRow).where(ServiceRow.host == "host-1"))).scalar_one()
        assert row.disabled_by == "operator"
    r = await client.put("/v2.1/os-services/enable", json={"host": "host-1", "binary": "nova-compute"})
    assert assert_schema("services.enable_disable_service", r)["service"]["status"] == "enabled"
    async with rt.db.reader() as s:
        row = (await s.execute(select(ServiceRow).where(ServiceRow.host == "host-1"))).scalar_one()
        assert (row.disabled, row.disabled_by, row.disabled_reason) == (False, None, None)
    r = await client.put("/v2.1/os-services/disable", json={"host": "host-2", "binary": "nova-compute"})
    assert assert_schema("services.enable_disable_service", r)["service"]["status"] == "disabled"
    # force-down only from 2.11
    body = {"host": "host-1", "binary": "nova-compute", "forced_down": True}
    assert (await client.put("/v2.1/os-services/force-down", json=body)).status_code == 400
    r = await client.put("/v2.1/os-services/force-down", json=body, headers=version("2.11"))
    assert assert_schema("services.update_forced_down", r)["service"]["forced_down"] is True
    r = await client.get("/v2.1/os-services", params={"host": "host-1"}, headers=version("2.11"))
    assert (r.json()["services"][0]["state"], r.json()["services"][0]["forced_down"]) == ("down", True)
    r = await client.put("/v2.1/os-services/enable", json={"host": "nohost", "binary": "nova-compute"})
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == "Could not find binary nova-compute on host nohost."
    r = await client.put("/v2.1/os-services/enable", json={"host": "controller", "binary": "nova-scheduler"})
    assert r.status_code == 400 and "nova-scheduler" in r.json()["badRequest"]["message"]
    r = await client.put("/v2.1/os-services/bogus", json={"host": "host-1", "binary": "nova-compute"})
    assert r.status_code == 404 and r.json()["itemNotFound"]["message"] == "Unknown action"


async def test_state_down_after_service_down_time(client, rt, hosts):
    async with rt.db.transaction() as s:
        await s.execute(update(ServiceRow).where(ServiceRow.host == "host-2").values(
            last_seen_up=utcnow() - dt.timedelta(seconds=rt.cfg.service_down_time + 1)))
    r = await client.get("/v2.1/os-services", params={"host": "host-2"})
    assert r.json()["services"][0]["state"] == "down"
    r = await client.get("/v2.1/os-hypervisors")
    states = {h["hypervisor_hostname"]: h["state"] for h in r.json()["hypervisors"]}
    assert states == {"host-1.example": "up", "host-2.example": "down"}


async def test_delete_service(client, rt, hosts):
    service_id = hosts[("host-2", "nova-compute")]
    async with rt.db.transaction() as s:
        s.add(Instance(uuid=str(uuid.uuid4()), host="host-2", node="host-2.example", vm_state="active"))
    r = await client.delete(f"/v2.1/os-services/{service_id}")
    assert r.status_code == 409 and "hosting instances" in r.json()["conflictingRequest"]["message"]
    r = await client.delete(f"/v2.1/os-services/{hosts[('host-1', 'nova-compute')]}")
    assert r.status_code == 204
    hosts_left = {s["host"] for s in (await client.get("/v2.1/os-services")).json()["services"]}
    assert "host-1" not in hosts_left
    r = await client.get("/v2.1/os-hypervisors")
    assert [h["hypervisor_hostname"] for h in r.json()["hypervisors"]] == ["host-2.example"]
    assert (await client.delete(f"/v2.1/os-services/{hosts[('host-1', 'nova-compute')]}")).status_code == 404
    r = await client.delete("/v2.1/os-services/abc")
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == \
        "Invalid input received: id must be an integer"
    # The host registers again: a fresh row.
    await Service(rt, "nova-compute", "compute", "host-1").register()
    assert "host-1" in {s["host"] for s in (await client.get("/v2.1/os-services")).json()["services"]}


async def test_hypervisors(client, rt, hosts):
    r = await client.get("/v2.1/os-hypervisors")
    hyps = assert_schema("hypervisors.list_search_hypervisors", r)["hypervisors"]
    assert [(h["hypervisor_hostname"], h["state"], h["status"]) for h in hyps] == [
        ("host-1.example", "up", "enabled"), ("host-2.example", "up", "enabled")]
    r = await client.get("/v2.1/os-hypervisors/detail")
    detail = assert_schema("hypervisors.list_hypervisors_detail", r)["hypervisors"]
    h2 = detail[1]
    assert (h2["vcpus_used"], h2["free_ram_mb"], h2["free_disk_gb"], h2["running_vms"], h2["host_ip"]) == (
        2, 131072 - 1024, 2038, 1, "192.0.2.2")
    assert h2["service"]["host"] == "host-2" and isinstance(h2["cpu_info"], str)
    r = await client.get("/v2.1/os-hypervisors/detail", headers=version("2.28"))
    assert isinstance(assert_schema("hypervisors.list_hypervisors_detail", r)["hypervisors"][0]["cpu_info"], dict)
    r = await client.get(f"/v2.1/os-hypervisors/{h2['id']}")
    assert assert_schema("hypervisors.get_hypervisor", r)["hypervisor"]["hypervisor_hostname"] == "host-2.example"
    for bad in ("999", "abc"):
        r = await client.get(f"/v2.1/os-hypervisors/{bad}")
        assert r.status_code == 404
        assert r.json()["itemNotFound"]["message"] == f"Hypervisor with ID '{bad}' could not be found."
    r = await client.get("/v2.1/os-hypervisors/statistics")
    stats = assert_schema("hypervisors.get_hypervisor_statistics", r)["hypervisor_statistics"]
    assert (stats["count"], stats["vcpus"], stats["vcpus_used"], stats["running_vms"]) == (2, 64, 2, 1)
    r = await client.get(f"/v2.1/os-hypervisors/{h2['id']}/uptime")
    assert " up 0 days" in assert_schema("hypervisors.get_hypervisor_uptime", r)["hypervisor"]["uptime"]
    r = await client.get("/v2.1/os-hypervisors/host-1/search")
    assert [h["hypervisor_hostname"] for h in assert_schema("hypervisors.list_search_hypervisors", r)[
        "hypervisors"]] == ["host-1.example"]
    r = await client.get("/v2.1/os-hypervisors/nomatch/search")
    assert r.status_code == 404
    async with rt.db.transaction() as s:
        s.add(Instance(uuid="11111111-2222-3333-4444-555555555555", display_name="vm1", host="host-1",
                       node="host-1.example", vm_state="active"))
    r = await client.get("/v2.1/os-hypervisors/host-1/servers")
    hyp = assert_schema("hypervisors.get_hypervisors_servers", r)["hypervisors"][0]
    assert hyp["servers"] == [{"uuid": "11111111-2222-3333-4444-555555555555", "name": "vm1"}]
    assert (await client.get("/v2.1/os-hypervisors", headers=member())).status_code == 403
    assert (await client.get("/v2.1/os-hypervisors/statistics", headers=member())).status_code == 403


async def test_hypervisor_paging_v233(client, hosts):
    h = version("2.33")
    r = await client.get("/v2.1/os-hypervisors", params={"limit": 1}, headers=h)
    body = assert_schema("hypervisors.list_search_hypervisors", r)
    assert len(body["hypervisors"]) == 1
    marker = body["hypervisors"][0]["id"]
    assert f"marker={marker}" in body["hypervisors_links"][0]["href"]
    r = await client.get("/v2.1/os-hypervisors/detail", params={"limit": 1, "marker": marker}, headers=h)
    body = assert_schema("hypervisors.list_hypervisors_detail", r)
    assert body["hypervisors"][0]["hypervisor_hostname"] == "host-2.example"
    assert "/os-hypervisors/detail?" in body["hypervisors_links"][0]["href"]
    r = await client.get("/v2.1/os-hypervisors", params={"marker": 12345}, headers=h)
    assert r.status_code == 400


async def test_availability_zones(client, rt, hosts):
    r = await client.get("/v2.1/os-availability-zone", headers=member())
    assert assert_schema("availability_zone.list_availability_zone_list", r)["availabilityZoneInfo"] == [
        {"zoneName": "nova", "zoneState": {"available": True}, "hosts": None}]
    r = await client.get("/v2.1/os-availability-zone/detail")
    zones = assert_schema("availability_zone.list_availability_zone_list_detail", r)["availabilityZoneInfo"]
    by_name = {z["zoneName"]: z for z in zones}
    assert set(by_name) == {"nova", "internal"}
    assert set(by_name["nova"]["hosts"]) == {"host-1", "host-2"}
    assert by_name["nova"]["hosts"]["host-1"]["nova-compute"]["available"] is True
    assert set(by_name["internal"]["hosts"]["controller"]) == {"nova-conductor", "nova-scheduler"}
    assert (await client.get("/v2.1/os-availability-zone/detail", headers=member())).status_code == 403
    # A zone whose every compute service is disabled is unavailable.
    async with rt.db.transaction() as s:
        await s.execute(update(ServiceRow).where(ServiceRow.host == "host-2").values(availability_zone="az2"))
    await client.put("/v2.1/os-services/disable", json={"host": "host-2", "binary": "nova-compute"})
    r = await client.get("/v2.1/os-availability-zone")
    assert assert_schema("availability_zone.list_availability_zone_list", r)["availabilityZoneInfo"] == [
        {"zoneName": "nova", "zoneState": {"available": True}, "hosts": None},
        {"zoneName": "az2", "zoneState": {"available": False}, "hosts": None}]


@pytest.mark.parametrize("ident", ["99999999999999999999", "-99999999999999999999"])
async def test_an_id_beyond_the_database_integers_is_no_such_service_or_hypervisor(client, hosts, ident):
    for path in (f"/v2.1/os-hypervisors/{ident}", f"/v2.1/os-hypervisors/{ident}/uptime"):
        r = await client.get(path)
        assert r.status_code == 404 and "itemNotFound" in r.json(), (path, r.text)
    r = await client.delete(f"/v2.1/os-services/{ident}")
    assert r.status_code == 404 and "itemNotFound" in r.json(), r.text
