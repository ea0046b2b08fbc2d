"""Error answers that follow Nova's for the microversion asked (nova/api/openstack/compute/servers.py
``_get_servers``, its query schema, and the action methods' microversion bounds)."""

from __future__ import annotations

import pytest
import pytest_asyncio

from nefos.objects import instance as instance_obj
from nefos.model import states
from tests.clouds import start_cloud, stop_cloud

PROJECT = "a" * 32
ADMIN = {"X-Project-Id": PROJECT, "X-User-Id": "b" * 32, "X-Roles": "admin,member,reader"}
MEMBER = {"X-Project-Id": PROJECT, "X-User-Id": "c" * 32, "X-Roles": "member,reader"}


def _h(mv: str, base: dict = ADMIN) -> dict:
    return {**base, "OpenStack-API-Version": f"compute {mv}"}


pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _with_a_server(where):
    """A cloud with one member's ACTIVE server (``sid``)."""
    harness = await start_cloud(where)
    net = await harness.make_network(headers=MEMBER)
    r = await harness.compute.post("/v2.1/servers", json={"server": {
        "name": "vm", "imageRef": await harness.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}]}}, headers=MEMBER)
    assert r.status_code == 202, r.text
    harness.sid = r.json()["server"]["id"]
    await harness.wait_status(harness.sid, "ACTIVE")
    return harness


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    """Shared by the tests that only read and ask (every answer here leaves the cloud as it was)."""
    harness = await _with_a_server(tmp_path_factory.mktemp("error-answers"))
    yield harness
    await stop_cloud(harness)


@pytest_asyncio.fixture(loop_scope="module")
async def own_cloud(tmp_path):
    """For a test that changes the server, a service or the list of servers."""
    harness = await _with_a_server(tmp_path)
    yield harness
    await stop_cloud(harness)


async def _list(cloud, query: str, mv: str = "2.1", headers: dict = ADMIN, detail: bool = False):
    path = "/v2.1/servers/detail" if detail else "/v2.1/servers"
    return await cloud.compute.get(f"{path}?{query}", headers=_h(mv, headers))


async def test_an_unknown_status_is_400_from_2_38_and_an_empty_list_before(cloud):
    for detail in (False, True):
        r = await _list(cloud, "status=bogus", "2.38", detail=detail)
        assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Invalid status value", r.text
        r = await _list(cloud, "status=bogus", "2.37", detail=detail)
        assert r.status_code == 200 and r.json() == {"servers": []}, r.text
    r = await _list(cloud, "status=ACTIVE", "2.38", headers=MEMBER)
    assert [s["id"] for s in r.json()["servers"]] == [cloud.sid]


async def _listed_by_status(cloud, status: str) -> bool:
    r = await _list(cloud, f"status={status}", "2.38")
    assert r.status_code == 200, r.text
    return cloud.sid in [s["id"] for s in r.json()["servers"]]


async def test_the_status_filter_matches_vm_and_task_state_as_nova(own_cloud):
    """Nova maps a status to (vm_states, task_states): REBOOT is active *and* a reboot task;
    a status that is a vm_state's default (ACTIVE, SHUTOFF) filters on the vm_state alone."""
    assert await _listed_by_status(own_cloud, "ACTIVE")
    for status in ("REBOOT", "HARD_REBOOT", "RESIZE", "REBUILD", "PASSWORD"):
        assert not await _listed_by_status(own_cloud, status), status
    await instance_obj.save(own_cloud.rt.db, own_cloud.sid, {"task_state": states.REBOOTING})
    assert await _listed_by_status(own_cloud, "REBOOT")
    assert await _listed_by_status(own_cloud, "ACTIVE")  # Nova: ACTIVE is vm_state active, any task
    assert not await _listed_by_status(own_cloud, "HARD_REBOOT")
    await instance_obj.save(own_cloud.rt.db, own_cloud.sid, {"task_state": states.REBOOT_STARTED_HARD})
    assert await _listed_by_status(own_cloud, "HARD_REBOOT") and not await _listed_by_status(own_cloud, "REBOOT")
    r = await _list(own_cloud, "status=REBOOT&status=HARD_REBOOT", "2.38")
    assert [s["id"] for s in r.json()["servers"]] == [own_cloud.sid], r.text
    await instance_obj.save(own_cloud.rt.db, own_cloud.sid,
                            {"vm_state": states.STOPPED, "task_state": states.RESIZE_PREP})
    assert await _listed_by_status(own_cloud, "RESIZE") and await _listed_by_status(own_cloud, "SHUTOFF")
    assert not await _listed_by_status(own_cloud, "ACTIVE") and not await _listed_by_status(own_cloud, "REBOOT")


async def test_listing_deleted_servers_by_status_is_for_administrators(cloud):
    r = await _list(cloud, "status=DELETED", headers=MEMBER)
    assert r.status_code == 403, r.text
    assert r.json()["forbidden"]["message"] == "Only administrators may list deleted instances"
    assert (await _list(cloud, "status=DELETED")).status_code == 200


async def test_all_tenants_and_locked_must_be_booleans(cloud):
    for headers in (ADMIN, MEMBER):
        r = await _list(cloud, "all_tenants=maybe", headers=headers)
        assert r.status_code == 400 and "Unrecognized value 'maybe'" in r.text, r.text
    r = await _list(cloud, "all_tenants=")  # the empty string asks for every project (Nova)
    assert r.status_code == 200 and cloud.sid in [s["id"] for s in r.json()["servers"]]
    r = await _list(cloud, "locked=maybe", "2.73", headers=MEMBER)
    assert r.status_code == 400, r.text
    r = await _list(cloud, "locked=maybe", "2.72", headers=MEMBER)  # not a member's filter yet: dropped
    assert r.status_code == 200, r.text
    r = await _list(cloud, "locked=false", "2.73", headers=MEMBER)
    assert [s["id"] for s in r.json()["servers"]] == [cloud.sid]


async def test_sort_keys_follow_nova_s_query_schema(cloud):
    r = await _list(cloud, "sort_key=bogus")
    assert r.status_code == 400 and "sort_key" in r.json()["badRequest"]["message"], r.text
    assert (await _list(cloud, "sort_key=display_name&sort_dir=asc")).status_code == 200
    assert (await _list(cloud, "sort_key=vcpus", "2.74")).status_code == 200  # accepted and ignored
    assert (await _list(cloud, "sort_key=vcpus", "2.75")).status_code == 400  # from 2.75 a 400
    assert (await _list(cloud, "sort_key=locked", "2.75")).status_code == 200
    r = await _list(cloud, "sort_key=host", headers=MEMBER)
    assert r.status_code == 403 and r.json()["forbidden"]["message"] == "Only administrators can sort servers by host"
    assert (await _list(cloud, "sort_key=node")).status_code == 200


async def test_joined_table_filters_are_400_for_those_who_may_use_every_filter(cloud):
    for name in ("metadata", "pci_devices", "_private"):
        r = await _list(cloud, f"{name}=x")
        assert r.status_code == 400 and r.json()["badRequest"]["message"] == f"Invalid filter field: {name}."
    r = await _list(cloud, "metadata=x", headers=MEMBER)  # a member's other filters are dropped
    assert r.status_code == 200 and [s["id"] for s in r.json()["servers"]] == [cloud.sid]


async def _action(cloud, body: dict, mv: str):
    return await cloud.compute.post(f"/v2.1/servers/{cloud.sid}/action", json=body, headers=_h(mv))


@pytest.mark.parametrize("body, last, there", [
    ({"addFixedIp": {"networkId": "x"}}, "2.43", 400),  # carried out: no port on that network
    ({"removeFixedIp": {"address": "10.0.0.9"}}, "2.43", 400),  # carried out: not the server's address
    ({"addFloatingIp": {"address": "172.24.4.9"}}, "2.43", 404),  # carried out: no such floating IP
    ({"removeFloatingIp": {"address": "172.24.4.9"}}, "2.43", 404),
    ({"os-getVNCConsole": {"type": "novnc"}}, "2.5", 200),
    ({"os-getSerialConsole": {"type": "serial"}}, "2.5", 400),  # serial consoles are not enabled
])
async def test_actions_nova_dropped_at_a_microversion_are_404_from_it(cloud, body, last, there):
    major, minor = last.split(".")
    after = f"{major}.{int(minor) + 1}"
    r = await _action(cloud, body, after)
    assert r.status_code == 404 and r.json() == {"itemNotFound": {
        "code": 404, "message": "The resource could not be found."}}, r.text
    r = await _action(cloud, body, last)
    assert r.status_code == there, r.text


async def test_trigger_crash_dump_starts_at_2_17(cloud):
    assert (await _action(cloud, {"trigger_crash_dump": None}, "2.16")).status_code == 404
    assert (await _action(cloud, {"trigger_crash_dump": None}, "2.17")).status_code == 501


async def test_reset_network_is_gone(cloud):
    for mv in ("2.1", "2.100"):
        r = await _action(cloud, {"resetNetwork": None}, mv)
        assert r.status_code == 410, r.text
        assert r.json() == {"computeFault": {"code": 410, "message": (
            "This resource is no longer available.  No forwarding address is given.")}}


async def test_force_down_before_2_11_is_404(own_cloud):
    body = {"host": own_cloud.hosts[0], "binary": "nova-compute"}
    for mv in ("2.1", "2.10"):
        r = await own_cloud.compute.put("/v2.1/os-services/force-down", json=body, headers=_h(mv))
        assert r.status_code == 404, r.text
        # forced_down is no field of that version's schema: 400 first, as Nova validates first
        r = await own_cloud.compute.put("/v2.1/os-services/force-down", json={**body, "forced_down": True},
                                    headers=_h(mv))
        assert r.status_code == 400, r.text
    r = await own_cloud.compute.put("/v2.1/os-services/force-down", json={**body, "forced_down": True},
                                headers=_h("2.11"))
    assert r.status_code == 200, r.text


async def _boot(cloud, name: str) -> str:
    net = (await cloud.network.get("/v2.0/networks", headers=MEMBER)).json()["networks"][0]
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": name, "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}]}}, headers=MEMBER)
    assert r.status_code == 202, r.text
    return r.json()["server"]["id"]


async def _names(cloud, query: str) -> list[str]:
    r = await _list(cloud, query, headers=MEMBER)
    assert r.status_code == 200, r.text
    return [s["name"] for s in r.json()["servers"]]


async def _paged_names(cloud, query: str) -> list[str]:
    """Every page of one server, each from the previous page's last id."""
    names, marker = [], None
    while True:
        r = await _list(cloud, query + "&limit=1" + (f"&marker={marker}" if marker else ""), headers=MEMBER)
        page = r.json()["servers"]
        if not page:
            return names
        names.append(page[0]["name"])
        marker = page[0]["id"]


async def test_the_server_list_is_sorted_and_paged_by_sort_key_and_sort_dir(own_cloud):
    """Nova sorts by every sort_key with its sort_dir (a missing one is the first given), then
    created_at and id; without sort_key, newest first; the marker pages in that order."""
    for name in ("b", "a"):
        await own_cloud.wait_status(await _boot(own_cloud, name), "ACTIVE")
    assert await _names(own_cloud, "") == ["a", "b", "vm"]  # created_at desc
    assert await _names(own_cloud, "sort_dir=asc") == ["vm", "b", "a"]
    assert await _names(own_cloud, "sort_key=display_name&sort_dir=asc") == ["a", "b", "vm"]
    assert await _names(own_cloud, "sort_key=display_name") == ["vm", "b", "a"]
    assert await _paged_names(own_cloud, "sort_key=display_name&sort_dir=asc") == ["a", "b", "vm"]
    assert await _paged_names(own_cloud, "sort_key=vm_state&sort_key=display_name&sort_dir=asc&sort_dir=desc") \
        == ["vm", "b", "a"]
    assert await _paged_names(own_cloud, "sort_key=vm_state&sort_dir=asc") == ["vm", "b", "a"]  # then created_at asc
    assert await _names(own_cloud, "sort_key=vcpus&sort_dir=asc") == ["a", "b", "vm"]  # ignored key, its dir too
    r = await _list(own_cloud, "sort_key=display_name&sort_dir=asc&sort_dir=desc")
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == \
        "Invalid input received: Sort direction size exceeds sort key size", r.text
    r = await _list(own_cloud, "sort_key=display_name&sort_dir=up")
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == \
        "Invalid input received: Unknown sort direction, must be 'desc' or 'asc'", r.text
