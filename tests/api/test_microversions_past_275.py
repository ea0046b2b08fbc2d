"""Microversions past 2.75 on a running cloud, each response checked against Tempest's schema for its
version (or Nova's own schema where Tempest has none): power-update events applied by the compute host
(2.76), an availability zone on unshelve (2.77; a host and unpinning, 2.91),
the server topology (2.78), accelerator-request-bound events (2.82), the list filters non-admins may
use (2.83) and flavor extra spec validation (2.86)."""

from __future__ import annotations

import copy
import time

import pytest

from nefos.control.compute.rest import microversion
from tests.api.test_microversions_servers import _boot, _h, _show
from tests.clouds import member, start_cloud, stop_cloud
from tests.schemas import assert_schema, resolve

SERVICE = {"X-Project-Id": "service", "X-User-Id": "nefos", "X-Roles": "service"}
EVENTS = "/v2.1/os-server-external-events"


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2, lifecycle_stopped_delay=0.0, sync_power_state_interval=-1)
    harness.net = await harness.make_network(shared=True)
    yield harness
    await stop_cloud(harness)


async def _active(cloud, mv: str = "2.75", **server) -> str:
    sid = (await _boot(cloud, mv, **server))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    return sid


async def _until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := await predicate()):
        assert time.monotonic() < deadline, "timed out"
        import asyncio
        await asyncio.sleep(0.05)
    return value


async def _actions(cloud, sid: str, mv: str = microversion.MAX_VERSION) -> list[dict]:
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-instance-actions", headers=_h(mv))
    return assert_schema("servers.list_instance_actions", r)["instanceActions"]


async def _action(cloud, sid: str, request_id: str, mv: str = microversion.MAX_VERSION) -> dict:
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-instance-actions/{request_id}", headers=_h(mv))
    return assert_schema("servers.show_instance_action", r)["instanceAction"]


def _events_schema(*names: str) -> dict:
    """Tempest has the 2.1 schema only: Nova's create_response_v2NN adds each version's names."""
    schema = copy.deepcopy(resolve("v2_1.server_external_events.create"))
    schema["status_code"] = [200, 207]
    schema["response_body"]["properties"]["events"]["items"]["properties"]["name"]["enum"] += list(names)
    return schema


EVENTS_V276 = _events_schema("volume-extended", "power-update")


def test_max_version():
    assert not microversion.MAX < microversion.APIVersion.parse("2.89")


# 2.76 ----------------------------------------------------------------------------------------------

async def test_power_update_event_applied_by_the_compute_host(cloud):
    sid = await _active(cloud)
    event = {"name": "power-update", "server_uuid": sid, "tag": "POWER_OFF"}
    r = await cloud.compute.post(EVENTS, json={"events": [event]}, headers=_h("2.75", SERVICE))
    assert r.status_code == 400  # not an event name before 2.76
    r = await cloud.compute.post(EVENTS, json={"events": [event]}, headers=_h("2.76", SERVICE))
    body = assert_schema(EVENTS_V276, r)
    assert body["events"] == [dict(event, status="completed", code=200)]
    request_id = r.headers["x-openstack-request-id"]
    shown = await cloud.wait_status(sid, "SHUTOFF")
    assert shown["OS-EXT-STS:power_state"] == 4 and shown["OS-EXT-STS:task_state"] is None
    # The hypervisor was brought to the reported state: the guest is off there too.
    info = await cloud.driver(shown["OS-EXT-SRV-ATTR:host"]).get_info({"uuid": sid})
    assert info["power_state"] == 4
    # Its own "stop" action (Nova's), with the acceptance and the compute host's compute_power_update.
    stop = next(a for a in await _actions(cloud, sid) if a["request_id"] == request_id)
    assert stop["action"] == "stop"

    async def finished():
        action = await _action(cloud, sid, request_id)
        return action if any(e["event"] == "compute_power_update" and e["result"] == "Success"
                             for e in action["events"]) else None
    await _until(finished)

    # POWER_ON on the stopped server: ACTIVE and running again, through a "start" action.
    r = await cloud.compute.post(EVENTS, json={"events": [dict(event, tag="POWER_ON")]},
                                 headers=_h("2.76", SERVICE))
    assert r.status_code == 200, r.text
    shown = await cloud.wait_status(sid, "ACTIVE")
    assert shown["OS-EXT-STS:power_state"] == 1
    start = next(a for a in await _actions(cloud, sid) if a["request_id"] == r.headers["x-openstack-request-id"])
    assert start["action"] == "start"


async def test_power_update_tag_required_and_checked(cloud):
    sid = await _active(cloud)
    r = await cloud.compute.post(EVENTS, json={"events": [{"name": "power-update", "server_uuid": sid},
                                                          {"name": "network-changed", "server_uuid": sid}]},
                                 headers=_h("2.76", SERVICE))
    assert assert_schema(EVENTS_V276, r)["events"][0]["code"] == 400 and r.status_code == 207
    assert r.json()["events"][0]["code"] == 400 and r.json()["events"][0]["status"] == "failed"
    before = len(await _actions(cloud, sid))
    # An unknown target power state is answered 200 but dropped (no action, no change), as Nova.
    r = await cloud.compute.post(EVENTS, json={"events": [{"name": "power-update", "server_uuid": sid,
                                                           "tag": "POWER_SIDEWAYS"}]}, headers=_h("2.76", SERVICE))
    assert r.status_code == 200 and r.json()["events"][0]["code"] == 200
    assert len(await _actions(cloud, sid)) == before
    assert (await _show(cloud, sid, "2.76"))["status"] == "ACTIVE"
    # POWER_ON on a running server is a no-op recorded in its "start" action.
    r = await cloud.compute.post(EVENTS, json={"events": [{"name": "power-update", "server_uuid": sid,
                                                           "tag": "POWER_ON"}]}, headers=_h("2.76", SERVICE))
    request_id = r.headers["x-openstack-request-id"]

    async def recorded():
        action = await _action(cloud, sid, request_id)
        return action if any(e["event"] == "compute_external_instance_event" for e in action["events"]) else None
    action = await _until(recorded)
    assert action["action"] == "start"
    assert not any(e["event"] == "compute_power_update" for e in action["events"])
    processed = next(e for e in action["events"] if e["event"] == "compute_external_instance_event")
    assert "no-op" in processed.get("details", "no-op")  # the details are shown from 2.84
    assert (await _show(cloud, sid, "2.76"))["status"] == "ACTIVE"


# 2.77 / 2.91 ---------------------------------------------------------------------------------------

async def _offloaded(cloud, sid: str) -> None:
    await cloud.action(sid, {"shelve": None})
    await cloud.wait_status(sid, {"SHELVED", "SHELVED_OFFLOADED"}, timeout=20)
    await _offloaded_after_shelve(cloud, sid)


async def _offloaded_after_shelve(cloud, sid: str) -> None:
    shown = await _show(cloud, sid, "2.75")
    # SHELVED with no task: offload it; SHELVED while the host offloads it on its own
    # (shelved_offload_time 0, Nova's default): only wait.
    if shown["status"] == "SHELVED" and shown["OS-EXT-STS:task_state"] is None:
        await cloud.action(sid, {"shelveOffload": None})
    await cloud.wait_status(sid, "SHELVED_OFFLOADED", timeout=20)


async def test_unshelve_availability_zone(cloud):
    sid = await _active(cloud)
    action = f"/v2.1/servers/{sid}/action"
    await cloud.action(sid, {"shelve": None})
    await cloud.wait_status(sid, {"SHELVED", "SHELVED_OFFLOADED"}, timeout=20)
    if (await _show(cloud, sid, "2.75"))["status"] == "SHELVED":
        r = await cloud.compute.post(action, json={"unshelve": {"availability_zone": "nova"}}, headers=_h("2.77"))
        assert r.status_code == 409, r.text  # a zone only for a SHELVED_OFFLOADED server
    await _offloaded_after_shelve(cloud, sid)
    for mv, body in (("2.76", {"availability_zone": "nova"}), ("2.77", {}), ("2.77", {"availability_zone": None}),
                     ("2.77", {"availability_zone": "nova", "host": "host-1"}), ("2.77", {"availability_zone": " x"})):
        r = await cloud.compute.post(action, json={"unshelve": body}, headers=_h(mv))
        assert r.status_code == 400, (mv, body, r.text)
    r = await cloud.compute.post(action, json={"unshelve": {"availability_zone": "nowhere"}}, headers=_h("2.77"))
    assert r.status_code == 400 and "not available" in r.text
    r = await cloud.compute.post(action, json={"unshelve": {"availability_zone": "nova"}}, headers=_h("2.77"))
    assert r.status_code == 202, r.text
    await cloud.wait_status(sid, "ACTIVE", timeout=20)
    assert (await _show(cloud, sid, "2.77"))["OS-EXT-AZ:availability_zone"] == "nova"


async def test_unshelve_to_a_host_and_unpin(cloud):
    sid = await _active(cloud, availability_zone="nova")
    await _offloaded(cloud, sid)
    action = f"/v2.1/servers/{sid}/action"
    r = await cloud.compute.post(action, json={"unshelve": {"host": "host-2"}}, headers=_h("2.90"))
    assert r.status_code == 400  # a host only from 2.91
    r = await cloud.compute.post(action, json={"unshelve": {"host": "host-2"}}, headers=_h("2.91", member()))
    assert r.status_code in (403, 404)  # admin only (and another project's server is not seen at all)
    r = await cloud.compute.post(action, json={"unshelve": {"host": "nowhere"}}, headers=_h("2.91"))
    assert r.status_code == 400, r.text
    r = await cloud.compute.post(action, json={"unshelve": {"availability_zone": None, "host": "host-2"}},
                                 headers=_h("2.91"))
    assert r.status_code == 202, r.text
    shown = await cloud.wait_status(sid, "ACTIVE", timeout=20)
    assert shown["OS-EXT-SRV-ATTR:host"] == "host-2"
    assert (await _show(cloud, sid, "2.96"))["pinned_availability_zone"] is None


# 2.78 ----------------------------------------------------------------------------------------------

TOPOLOGY = {"status_code": [200], "response_body": {  # Nova's server_topology.index_response
    "type": "object", "properties": {
        "nodes": {"type": "array", "items": {"type": "object"}},
        "pagesize_kb": {"type": ["integer", "null"]}},
    "required": ["nodes", "pagesize_kb"], "additionalProperties": False}}


async def test_server_topology(cloud):
    sid = await _active(cloud)
    url = f"/v2.1/servers/{sid}/topology"
    assert (await cloud.compute.get(url, headers=_h("2.77"))).status_code == 404
    body = assert_schema(TOPOLOGY, await cloud.compute.get(url, headers=_h("2.78")))
    assert body == {"nodes": [], "pagesize_kb": None}  # Nefos' guests have no NUMA topology
    r = await cloud.compute.get("/v2.1/servers/00000000-0000-0000-0000-000000000000/topology", headers=_h("2.78"))
    assert r.status_code == 404
    r = await cloud.compute.get(url, headers=_h("2.78", member()))
    assert r.status_code == 404  # another project's server


# 2.82 ----------------------------------------------------------------------------------------------

async def test_accelerator_request_bound_event(cloud):
    sid = await _active(cloud)
    event = {"name": "accelerator-request-bound", "server_uuid": sid, "tag": "arq-1"}
    r = await cloud.compute.post(EVENTS, json={"events": [event]}, headers=_h("2.81", SERVICE))
    assert r.status_code == 400
    schema = _events_schema("volume-extended", "power-update", "accelerator-request-bound")
    r = await cloud.compute.post(EVENTS, json={"events": [event]}, headers=_h("2.82", SERVICE))
    assert assert_schema(schema, r)["events"][0]["code"] == 200 and r.status_code == 200
    del event["tag"]  # a tag is required
    accepted = {"name": "network-changed", "server_uuid": sid}
    r = await cloud.compute.post(EVENTS, json={"events": [event, accepted]}, headers=_h("2.82", SERVICE))
    assert assert_schema(schema, r)["events"][0]["code"] == 400 and r.status_code == 207
    r = await cloud.compute.post(EVENTS, json={"events": [event]}, headers=_h("2.82", SERVICE))
    assert r.status_code == 404  # no event accepted (Nova)


# 2.83 ----------------------------------------------------------------------------------------------

async def test_more_list_filters_for_non_admins(cloud):
    owner = member()
    r = await cloud.compute.post("/v2.1/os-keypairs", json={"keypair": {"name": "k"}}, headers=_h("2.2", owner))
    assert r.status_code in (200, 201), r.text
    with_key = (await _boot(cloud, "2.83", headers=_h("2.83", owner), key_name="k"))["server"]["id"]
    without = (await _boot(cloud, "2.83", headers=_h("2.83", owner)))["server"]["id"]
    for sid in (with_key, without):
        await cloud.wait_status(sid, "ACTIVE", headers=owner)

    async def listed(mv: str, **params) -> set[str]:
        r = await cloud.compute.get("/v2.1/servers/detail", params=params, headers=_h(mv, owner))
        return {s["id"] for s in assert_schema("servers.list_servers_detail", r)["servers"]}
    assert await listed("2.82", key_name="k") == {with_key, without}  # dropped before 2.83
    assert await listed("2.83", key_name="k") == {with_key}
    assert await listed("2.83", power_state="1", vm_state="active", availability_zone="nova",
                        progress="0", config_drive="") == {with_key, without}
    assert await listed("2.83", power_state="4") == set()
    assert await listed("2.83", user_id=owner["X-User-Id"]) == {with_key, without}
    assert await listed("2.83", user_id="someone-else") == set()
    assert await listed("2.83", created_at="^2") == {with_key, without}
    assert await listed("2.83", terminated_at=".") == set()


# 2.86 ----------------------------------------------------------------------------------------------

async def test_flavor_extra_spec_validation(cloud):
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {"name": "xs", "ram": 64, "vcpus": 1, "disk": 1}},
                                 headers=_h("2.86"))
    fid = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]["id"]
    url = f"/v2.1/flavors/{fid}/os-extra_specs"
    bad = {"hw:cpu_policy": "sometimes"}
    r = await cloud.compute.post(url, json={"extra_specs": bad}, headers=_h("2.85"))
    assert r.status_code == 200  # not validated before 2.86
    for specs in (bad, {"hw:no_such_spec": "1"}, {"hw:numa_nodes": "two"}, {"resources:VCPU": "-"},
                  {"trait:HW_CPU_X86_AVX": "maybe"}, {"hw:mem_encryption": "perhaps"}):
        r = await cloud.compute.post(url, json={"extra_specs": specs}, headers=_h("2.86"))
        assert r.status_code == 400 and "Validation failed" in r.text, (specs, r.text)
    good = {"hw:cpu_policy": "shared", "foo:bar": "baz", "hw:numa_nodes": "1", "resources1:CUSTOM_GPU": "2",
            "trait:CUSTOM_FAST": "required", "aggregate_instance_extra_specs:ssd": "true", "plain": "x"}
    r = await cloud.compute.post(url, json={"extra_specs": good}, headers=_h("2.86"))
    body = assert_schema("flavors_extra_specs.set_get_flavor_extra_specs", r)
    assert {k: body["extra_specs"][k] for k in good} == good
    r = await cloud.compute.put(f"{url}/hw:numa_nodes", json={"hw:numa_nodes": "x"}, headers=_h("2.86"))
    assert r.status_code == 400
    r = await cloud.compute.put(f"{url}/hw:numa_nodes", json={"hw:numa_nodes": "2"}, headers=_h("2.86"))
    assert assert_schema("flavors_extra_specs.set_get_flavor_extra_specs_key", r) == {"hw:numa_nodes": "2"}
