"""Microversions 2.48 .. 2.75 of servers and their actions, on a running cloud, each response checked
against Tempest's schema for its version: tags on create and the tags API (2.26, 2.52), key_name and
user_data on rebuild (2.54, 2.57), trusted image certificates (2.63), changes-before (2.66), server
groups in the view (2.71), locked_reason (2.73), a requested host (2.74), strict list queries and whole
servers from update and rebuild (2.75), and the instance actions changes (2.51, 2.58, 2.62, 2.66)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest

from tests.clouds import ADMIN, member, start_cloud, stop_cloud
from tests.schemas import assert_schema


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2)
    harness.net = await harness.make_network()
    yield harness
    await stop_cloud(harness)


def _h(mv: str, base: dict | None = None) -> dict:
    return {**(base if base is not None else ADMIN), "OpenStack-API-Version": f"compute {mv}"}


async def _boot(cloud, mv: str, expect=202, headers=None, **server) -> dict:
    body = {"name": "vm", "imageRef": await cloud.default_image(), "flavorRef": "1",
            "networks": [{"uuid": cloud.net["id"]}], **server}
    r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=headers or _h(mv))
    assert r.status_code == expect, r.text
    return r.json()


async def _show(cloud, sid: str, mv: str, headers=None) -> dict:
    r = await cloud.compute.get(f"/v2.1/servers/{sid}", headers=headers or _h(mv))
    return assert_schema("servers.get_server", r)["server"]


async def test_tags_on_create_and_the_tags_api(cloud):
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "t", "imageRef": await cloud.default_image(), "flavorRef": "1", "networks": "none",
        "tags": ["a"]}}, headers=_h("2.51"))
    assert r.status_code == 400  # tags on create only from 2.52
    sid = (await _boot(cloud, "2.52", tags=["web", "prod", "web"]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    assert (await _show(cloud, sid, "2.52"))["tags"] == ["web", "prod"]
    tags = f"/v2.1/servers/{sid}/tags"
    r = await cloud.compute.get(tags, headers=_h("2.26"))
    assert r.status_code == 200 and r.json() == {"tags": ["web", "prod"]}
    assert (await cloud.compute.get(tags, headers=_h("2.25"))).status_code == 404
    assert (await cloud.compute.put(f"{tags}/db", headers=_h("2.26"))).status_code == 201
    assert (await cloud.compute.put(f"{tags}/db", headers=_h("2.26"))).status_code == 204
    assert (await cloud.compute.get(f"{tags}/db", headers=_h("2.26"))).status_code == 204
    assert (await cloud.compute.put(f"{tags}/a,b", headers=_h("2.26"))).status_code == 400
    assert (await cloud.compute.delete(f"{tags}/prod", headers=_h("2.26"))).status_code == 204
    assert (await cloud.compute.get(f"{tags}/prod", headers=_h("2.26"))).status_code == 404
    r = await cloud.compute.get("/v2.1/servers/detail", params={"tags": "web,db"}, headers=_h("2.26"))
    assert [s["id"] for s in assert_schema("servers.list_servers_detail", r)["servers"]] == [sid]
    r = await cloud.compute.get("/v2.1/servers", params={"not-tags-any": "db"}, headers=_h("2.26"))
    assert assert_schema("servers.list_servers", r)["servers"] == []
    r = await cloud.compute.put(tags, json={"tags": ["x"]}, headers=_h("2.26"))
    assert r.json() == {"tags": ["x"]}
    assert (await cloud.compute.delete(tags, headers=_h("2.26"))).status_code == 204
    assert (await _show(cloud, sid, "2.26"))["tags"] == []


async def test_rebuild_key_name_user_data_and_whole_server(cloud):
    r = await cloud.compute.post("/v2.1/os-keypairs", json={"keypair": {"name": "k1"}}, headers=_h("2.2"))
    assert r.status_code == 201, r.text
    sid = (await _boot(cloud, "2.75", key_name="k1"))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    image = await cloud.default_image()
    action = f"/v2.1/servers/{sid}/action"
    r = await cloud.compute.post(action, json={"rebuild": {"imageRef": image, "key_name": None}}, headers=_h("2.53"))
    assert r.status_code == 400  # key_name on rebuild only from 2.54
    r = await cloud.compute.post(action, json={"rebuild": {"imageRef": image, "key_name": None}}, headers=_h("2.54"))
    body = assert_schema("servers.rebuild_server_with_admin_pass", r)["server"]
    assert body["key_name"] is None and "OS-EXT-STS:vm_state" not in body
    await cloud.wait_status(sid, "ACTIVE")
    r = await cloud.compute.post(action, json={"rebuild": {"imageRef": image, "personality": []}},
                                 headers=_h("2.57"))
    assert r.status_code == 400  # personality is gone from 2.57
    user_data = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    r = await cloud.compute.post(action, json={"rebuild": {"imageRef": image, "user_data": user_data,
                                                           "key_name": "k1"}}, headers=_h("2.75"))
    body = assert_schema("servers.rebuild_server_with_admin_pass", r)["server"]
    assert body["key_name"] == "k1" and body["OS-EXT-STS:task_state"] == "rebuilding"  # the whole server
    assert body["user_data"] == user_data and body["server_groups"] == []
    await cloud.wait_status(sid, "ACTIVE")
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"name": "n"}}, headers=_h("2.75"))
    body = assert_schema("servers.update_server", r)["server"]
    assert body["name"] == "n" and "OS-EXT-STS:vm_state" in body and body["locked_reason"] is None
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"name": "m"}}, headers=_h("2.74"))
    assert "OS-EXT-STS:vm_state" not in assert_schema("servers.update_server", r)["server"]
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "p", "imageRef": image, "flavorRef": "1", "networks": "none", "personality": []}},
        headers=_h("2.57"))
    assert r.status_code == 400


async def test_trusted_image_certificates_fail_the_build(cloud):
    """2.63: without a key manager no certificate can be validated, so the build fails (never an
    unverified boot), and the certificates show in every view."""
    created = await _boot(cloud, "2.63", trusted_image_certificates=["cert-1", "cert-2"])
    sid = created["server"]["id"]
    server = await cloud.wait_status(sid, "ERROR")
    shown = await _show(cloud, sid, "2.63")
    assert shown["trusted_image_certificates"] == ["cert-1", "cert-2"]
    assert "certificate validation failed" in server["fault"]["message"].lower()
    r = await cloud.compute.get("/v2.1/servers/detail", headers=_h("2.63"))
    assert assert_schema("servers.list_servers_detail", r)["servers"][0]["trusted_image_certificates"]
    for bad in ([], ["a", "a"], [""]):
        await _boot(cloud, "2.63", expect=400, trusted_image_certificates=bad)
    await _boot(cloud, "2.62", expect=400, trusted_image_certificates=["c"])
    plain = (await _boot(cloud, "2.63"))["server"]["id"]
    await cloud.wait_status(plain, "ACTIVE")
    assert (await _show(cloud, plain, "2.63"))["trusted_image_certificates"] is None
    r = await cloud.compute.post(f"/v2.1/servers/{plain}/action", json={"rebuild": {
        "imageRef": await cloud.default_image(), "trusted_image_certificates": ["c"]}}, headers=_h("2.63"))
    assert assert_schema("servers.rebuild_server_with_admin_pass", r)["server"]["trusted_image_certificates"] == ["c"]
    await cloud.wait_status(plain, "ERROR")


async def test_server_groups_locked_reason_and_requested_host(cloud):
    r = await cloud.compute.post("/v2.1/os-server-groups", json={"server_group": {
        "name": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": 2}}}, headers=_h("2.64"))
    group = r.json()["server_group"]
    body = {"name": "vm", "imageRef": await cloud.default_image(), "flavorRef": "1",
            "networks": [{"uuid": cloud.net["id"]}], "host": "host-2"}
    r = await cloud.compute.post("/v2.1/servers", json={"server": body, "os:scheduler_hints": {
        "group": group["id"]}}, headers=_h("2.74"))
    assert r.status_code == 202, r.text
    sid = r.json()["server"]["id"]
    server = await cloud.wait_status(sid, "ACTIVE")
    assert server["OS-EXT-SRV-ATTR:host"] == "host-2"
    assert (await _show(cloud, sid, "2.71"))["server_groups"] == [group["id"]]
    assert "server_groups" not in (await _show(cloud, sid, "2.70"))
    r = await cloud.compute.get("/v2.1/servers/detail", headers=_h("2.71"))
    assert "server_groups" not in assert_schema("servers.list_servers_detail", r)["servers"][0]
    # A second member fits host-2 too (max_server_per_host 2).
    r = await cloud.compute.post("/v2.1/servers", json={"server": dict(body, name="vm2"), "os:scheduler_hints": {
        "group": group["id"]}}, headers=_h("2.74"))
    assert (await cloud.wait_status(r.json()["server"]["id"], "ACTIVE"))["OS-EXT-SRV-ATTR:host"] == "host-2"
    for bad, code in (({"host": "nowhere"}, 400), ({"hypervisor_hostname": "nowhere"}, 400),
                      ({"host": "host-1", "availability_zone": "nova:host-1"}, 400)):
        r = await cloud.compute.post("/v2.1/servers", json={"server": {**body, **bad}}, headers=_h("2.74"))
        assert r.status_code == code, (bad, r.text)
    r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=_h("2.73"))
    assert r.status_code == 400  # host only from 2.74
    r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=_h("2.74", member()))
    assert r.status_code == 403
    action = f"/v2.1/servers/{sid}/action"
    r = await cloud.compute.post(action, json={"lock": {"locked_reason": "audit"}}, headers=_h("2.73"))
    assert r.status_code == 202, r.text
    assert (await _show(cloud, sid, "2.73"))["locked_reason"] == "audit"
    r = await cloud.compute.get("/v2.1/servers/detail", params={"locked": "true"}, headers=_h("2.73"))
    assert [s["id"] for s in assert_schema("servers.list_servers_detail", r)["servers"]] == [sid]
    r = await cloud.compute.get("/v2.1/servers", params={"locked": "true"}, headers=_h("2.72"))
    assert len(r.json()["servers"]) == 2  # not a filter before 2.73
    await cloud.compute.post(action, json={"unlock": None}, headers=_h("2.73"))
    assert (await _show(cloud, sid, "2.73"))["locked_reason"] is None


async def test_list_queries_changes_before_and_strictness(cloud):
    sid = (await _boot(cloud, "2.75"))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    now = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    past = "2000-01-01T00:00:00Z"
    r = await cloud.compute.get("/v2.1/servers", params={"changes-before": now}, headers=_h("2.66"))
    assert [s["id"] for s in assert_schema("servers.list_servers", r)["servers"]] == [sid]
    r = await cloud.compute.get("/v2.1/servers", params={"changes-before": past}, headers=_h("2.66"))
    assert r.json()["servers"] == []
    r = await cloud.compute.get("/v2.1/servers", params={"changes-before": past}, headers=_h("2.65"))
    assert len(r.json()["servers"]) == 1  # ignored before 2.66
    r = await cloud.compute.get("/v2.1/servers", params={"changes-since": now, "changes-before": past},
                                headers=_h("2.66"))
    assert r.status_code == 400
    assert (await cloud.compute.get("/v2.1/servers", params={"bogus": 1}, headers=_h("2.74"))).status_code == 200
    r = await cloud.compute.get("/v2.1/servers/detail", params={"bogus": 1}, headers=_h("2.75"))
    assert r.status_code == 400 and "bogus" in r.json()["badRequest"]["message"]
    # Names starting with "_" pass the 2.75 schema; Nova then refuses them as filters (400) to those
    # who may use every filter and drops them for the others.
    r = await cloud.compute.get("/v2.1/servers", params={"_private": 1, "name": "vm"}, headers=_h("2.75"))
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Invalid filter field: _private."
    r = await cloud.compute.get("/v2.1/servers", params={"_private": 1, "name": "vm"},
                                headers=_h("2.75", member()))
    assert r.status_code == 200


async def test_instance_actions_v251_v258_v262(cloud):
    sid = (await _boot(cloud, "2.58"))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    for body, status in (({"os-stop": None}, "SHUTOFF"), ({"os-start": None}, "ACTIVE")):
        await cloud.action(sid, body)
        await cloud.wait_status(sid, status)
    base = f"/v2.1/servers/{sid}/os-instance-actions"
    r = await cloud.compute.get(base, params={"limit": 2}, headers=_h("2.58"))
    body = assert_schema("servers.list_instance_actions", r)
    assert [a["action"] for a in body["instanceActions"]] == ["start", "stop"]
    assert all(a["updated_at"] for a in body["instanceActions"]) and body["links"][0]["rel"] == "next"
    r = await cloud.compute.get(base, params={"marker": body["instanceActions"][-1]["request_id"]},
                                headers=_h("2.58"))
    assert [a["action"] for a in assert_schema("servers.list_instance_actions", r)["instanceActions"]] == ["create"]
    future = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()
    r = await cloud.compute.get(base, params={"changes-since": future}, headers=_h("2.58"))
    assert r.json()["instanceActions"] == []
    r = await cloud.compute.get(base, params={"changes-before": future}, headers=_h("2.66"))
    assert len(r.json()["instanceActions"]) == 3
    assert (await cloud.compute.get(base, params={"changes-before": future}, headers=_h("2.58"))).status_code == 400
    assert (await cloud.compute.get(base, params={"marker": "nope"}, headers=_h("2.58"))).status_code == 400
    create_id = r.json()["instanceActions"][-1]["request_id"]
    # Members see events from 2.51 (without tracebacks or host), the hashed hostId from 2.62.
    who = member(project=(await cloud.server(sid))["tenant_id"])
    for mv, who_headers, events, host in (("2.50", who, False, False), ("2.51", who, True, False),
                                          ("2.62", who, True, False), ("2.62", ADMIN, True, True)):
        r = await cloud.compute.get(f"{base}/{create_id}", headers=_h(mv, who_headers))
        action = assert_schema("servers.show_instance_action", r)["instanceAction"]
        assert ("events" in action) == events, (mv, action)
        if events:
            event = action["events"][0]
            assert ("host" in event) == host and ("traceback" in event) == host
            assert ("hostId" in event) == (mv == "2.62")
