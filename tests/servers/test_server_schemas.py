"""Every servers / actions / metadata / instance-actions response matches Tempest's schemas.

Tempest ships the Compute API's published response schemas per microversion
(``tempest.lib.api_schema.response.compute.v2_N``); ``tests.schemas.assert_schema``
picks the one Tempest would use for the microversion the response echoes. The
whole life of a server is driven at 2.1, 2.19, 2.37, 2.47, 2.75, 2.89 and 2.100, as admin and as
a project member, including a server in ERROR (with a fault) and one still
building.
"""

from __future__ import annotations

import pytest

from tests.clouds import ADMIN, member
from tests.schemas import assert_schema

VERSIONS = ["2.1", "2.19", "2.37", "2.47", "2.75", "2.89", "2.100"]


def _v(mv: str) -> tuple[int, int]:
    major, minor = mv.split(".")
    return int(major), int(minor)


def _headers(mv: str, base: dict | None = None) -> dict:
    return {**(base if base is not None else ADMIN), "OpenStack-API-Version": f"compute {mv}"}


def _check(name: str, response, mv: str):
    """The Tempest schema, plus the headers every Compute API response carries."""
    assert response.headers["openstack-api-version"] == f"compute {mv}", response.headers
    assert response.headers["x-openstack-nova-api-version"] == mv
    assert response.headers["x-openstack-request-id"].startswith("req-")
    return assert_schema(name, response)


async def _create(cloud, mv: str, headers: dict, **server) -> dict:
    body = {"name": "schema-vm", "imageRef": await cloud.default_image(), "flavorRef": "1", **server}
    r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=headers)
    created = _check("servers.create_server_with_admin_pass", r, mv)
    assert r.headers["location"].endswith(f"/v2.1/servers/{created['server']['id']}")
    return created["server"]


async def _walk_server(cloud, mv: str, headers: dict, networks) -> None:
    """Create, show, list, update, metadata CRUD, actions, instance actions, delete."""
    get, post, put, delete = (cloud.compute.get, cloud.compute.post, cloud.compute.put,
                              cloud.compute.delete)
    extra = {"description": "first"} if mv != "2.1" else {}
    server = await _create(cloud, mv, headers, networks=networks, metadata={"role": "web"}, **extra)
    sid = server["id"]
    # Still building (no host yet, perhaps): the schema holds in every state.
    body = _check("servers.get_server", await get(f"/v2.1/servers/{sid}", headers=headers), mv)
    assert body["server"]["status"] in ("BUILD", "ACTIVE")
    await cloud.wait_status(sid, "ACTIVE", headers=headers)

    body = _check("servers.get_server", await get(f"/v2.1/servers/{sid}", headers=headers), mv)
    shown = body["server"]
    if _v(mv) >= (2, 19):
        assert shown["description"] == "first"
    if networks != "none":
        assert shown["addresses"], shown
    _check("servers.list_servers", await get("/v2.1/servers", headers=headers), mv)
    _check("servers.list_servers_detail", await get("/v2.1/servers/detail", headers=headers), mv)
    body = _check("servers.list_servers", await get("/v2.1/servers", params={"limit": 1}, headers=headers), mv)
    assert body["servers_links"][0]["rel"] == "next"
    body = _check("servers.list_servers_detail",
                  await get("/v2.1/servers/detail", params={"limit": 1}, headers=headers), mv)
    assert body["servers_links"][0]["rel"] == "next"

    update = {"name": "renamed"}
    if mv != "2.1":
        update["description"] = "second"
    body = _check("servers.update_server",
                  await put(f"/v2.1/servers/{sid}", json={"server": update}, headers=headers), mv)
    assert body["server"]["name"] == "renamed"

    # Metadata CRUD.
    base = f"/v2.1/servers/{sid}/metadata"
    body = _check("servers.list_server_metadata", await get(base, headers=headers), mv)
    assert body["metadata"] == {"role": "web"}
    body = _check("servers.update_server_metadata",
                  await post(base, json={"metadata": {"tier": "1"}}, headers=headers), mv)
    assert body["metadata"] == {"role": "web", "tier": "1"}
    body = _check("servers.set_server_metadata",
                  await put(base, json={"metadata": {"a": "b", "c": "d"}}, headers=headers), mv)
    assert body["metadata"] == {"a": "b", "c": "d"}
    body = _check("servers.set_show_server_metadata_item", await get(f"{base}/a", headers=headers), mv)
    assert body["meta"] == {"a": "b"}
    body = _check("servers.set_show_server_metadata_item",
                  await put(f"{base}/e", json={"meta": {"e": "f"}}, headers=headers), mv)
    assert body["meta"] == {"e": "f"}
    _check("servers.delete_server_metadata_item", await delete(f"{base}/c", headers=headers), mv)
    body = _check("servers.list_server_metadata", await get(base, headers=headers), mv)
    assert body["metadata"] == {"a": "b", "e": "f"}

    # Actions: 202 and no body, each through its task_state.
    for action, status in ((({"os-stop": None}), "SHUTOFF"), ({"os-start": None}, "ACTIVE"),
                           ({"reboot": {"type": "SOFT"}}, "ACTIVE"), ({"reboot": {"type": "HARD"}}, "ACTIVE"),
                           ({"pause": None}, "PAUSED"), ({"unpause": None}, "ACTIVE"),
                           ({"suspend": None}, "SUSPENDED"), ({"resume": None}, "ACTIVE")):
        r = await post(f"/v2.1/servers/{sid}/action", json=action, headers=headers)
        _check("servers.server_actions_common_schema", r, mv)
        body = _check("servers.get_server", await get(f"/v2.1/servers/{sid}", headers=headers), mv)
        await cloud.wait_status(sid, status, headers=headers)
    for action in ({"lock": None}, {"unlock": None}):
        r = await post(f"/v2.1/servers/{sid}/action", json=action, headers=ADMIN | _headers(mv, {}))
        _check("servers.server_actions_common_schema", r, mv)

    # Instance actions, with their events.
    body = _check("servers.list_instance_actions",
                  await get(f"/v2.1/servers/{sid}/os-instance-actions", headers=headers), mv)
    names = [a["action"] for a in body["instanceActions"]]
    assert names[-1] == "create" and "stop" in names and "reboot" in names
    for action in body["instanceActions"]:
        shown = _check("servers.show_instance_action", await get(
            f"/v2.1/servers/{sid}/os-instance-actions/{action['request_id']}", headers=headers), mv)
        # API-only actions have no compute events; before 2.51 only admins see events at all.
        if action["action"] not in ("lock", "unlock") and (headers.get("X-Roles") is None or _v(mv) >= (2, 51)):
            assert shown["instanceAction"]["events"], shown

    _check("servers.delete_server", await delete(f"/v2.1/servers/{sid}", headers=headers), mv)
    await cloud.wait_gone(sid, headers=headers)
    # A deleted server's actions stay readable.
    _check("servers.list_instance_actions",
           await get(f"/v2.1/servers/{sid}/os-instance-actions", headers=headers), mv)


@pytest.mark.parametrize("mv", VERSIONS)
async def test_server_life_matches_schemas_as_admin(cloud, mv):
    net = await cloud.make_network()
    networks = [{"uuid": net["id"]}]
    await _walk_server(cloud, mv, _headers(mv), networks)


@pytest.mark.parametrize("mv", VERSIONS)
async def test_server_life_matches_schemas_as_member(cloud, mv):
    headers = _headers(mv, member())
    await cloud.make_network(headers=member())
    # 2.37 requires networks: "auto" picks the project's only network; earlier versions default to it.
    networks = "auto" if _v(mv) >= (2, 37) else [{"uuid": (await _only_network(cloud))}]
    await _walk_server(cloud, mv, headers, networks)


async def _only_network(cloud) -> str:
    r = await cloud.network.get("/v2.0/networks")
    (net,) = r.json()["networks"]
    return net["id"]


@pytest.mark.parametrize("mv", ["2.37", "2.47"])
async def test_networks_none_and_auto_match_schemas(cloud, mv):
    headers = _headers(mv)
    none = await _create(cloud, mv, headers, networks="none")
    server = await cloud.wait_status(none["id"], "ACTIVE")
    assert server["addresses"] == {}
    body = _check("servers.get_server", await cloud.compute.get(f"/v2.1/servers/{none['id']}", headers=headers), mv)
    assert body["server"]["addresses"] == {}
    await cloud.make_network()
    auto = await _create(cloud, mv, headers, networks="auto")
    await cloud.wait_status(auto["id"], "ACTIVE")
    body = _check("servers.get_server", await cloud.compute.get(f"/v2.1/servers/{auto['id']}", headers=headers), mv)
    assert list(body["server"]["addresses"]) == ["private"]


async def _error_server(cloud, mv: str, headers: dict) -> str:
    flavor_id = "fail-everywhere"
    r = await cloud.compute.get(f"/v2.1/flavors/{flavor_id}")
    if r.status_code == 404:
        r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
            "name": flavor_id, "id": flavor_id, "ram": 256, "vcpus": 1, "disk": 1}})
        assert r.status_code == 200, r.text
        r = await cloud.compute.post(f"/v2.1/flavors/{flavor_id}/os-extra_specs",
                                     json={"extra_specs": {"nefos:fake_fail_spawn": "*"}})
        assert r.status_code == 200, r.text
    networks = "none" if _v(mv) >= (2, 37) else None
    extra = {"networks": networks} if networks else {}
    server = await _create(cloud, mv, headers, flavorRef=flavor_id, **extra)
    await cloud.wait_status(server["id"], "ERROR", headers=headers)
    return server["id"]


@pytest.mark.parametrize("mv", VERSIONS)
@pytest.mark.parametrize("who", ["admin", "member"])
async def test_server_with_fault_matches_schemas(cloud, mv, who):
    headers = _headers(mv, member() if who == "member" else ADMIN)
    sid = await _error_server(cloud, mv, headers)
    body = _check("servers.get_server", await cloud.compute.get(f"/v2.1/servers/{sid}", headers=headers), mv)
    fault = body["server"]["fault"]
    assert fault["code"] == 500 and fault["message"]
    assert ("details" in fault) == (who == "admin")  # a 500's details are for admins only
    assert "progress" not in body["server"]
    body = _check("servers.list_servers_detail", await cloud.compute.get(
        "/v2.1/servers/detail", params={"status": "ERROR"}, headers=headers), mv)
    assert [s["id"] for s in body["servers"]] == [sid] and body["servers"][0]["fault"]
    body = _check("servers.update_server", await cloud.compute.put(
        f"/v2.1/servers/{sid}", json={"server": {"name": "broken"}}, headers=headers), mv)
    assert body["server"]["fault"]["message"] == fault["message"]
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-instance-actions", headers=headers)
    (action,) = _check("servers.list_instance_actions", r, mv)["instanceActions"]
    body = _check("servers.show_instance_action", await cloud.compute.get(
        f"/v2.1/servers/{sid}/os-instance-actions/{action['request_id']}", headers=headers), mv)
    if who == "member" and _v(mv) < (2, 51):
        assert "events" not in body["instanceAction"]  # before 2.51 only admins see events
        events = []
    else:
        events = body["instanceAction"]["events"]
        assert any(e["result"] == "Error" for e in events)
    assert all(("traceback" in e) == (who == "admin") for e in events)
    _check("servers.delete_server", await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=headers), mv)
    await cloud.wait_gone(sid, headers=headers)


@pytest.mark.parametrize("mv", VERSIONS)
async def test_error_bodies_echo_the_version(cloud, mv):
    headers = _headers(mv)
    r = await cloud.compute.get("/v2.1/servers/00000000-0000-0000-0000-000000000000", headers=headers)
    assert r.status_code == 404
    assert r.headers["openstack-api-version"] == f"compute {mv}"
    assert r.headers["x-openstack-request-id"].startswith("req-")
    assert set(r.json()) == {"itemNotFound"}
