"""``POST /v2.1/os-server-external-events`` against the Compute API reference (and Tempest's schema)."""

from __future__ import annotations

import copy
import uuid

import pytest
import pytest_asyncio
from sqlalchemy import select

from nefos.db.models import InstanceExternalEvent
from nefos.objects import instance as instance_obj
from tests.events.conftest import QUICK, SERVICE, action_events, boot, eventually
from tests.clouds import member, start_cloud, stop_cloud
from tests.schemas import assert_schema, resolve

URL = "/v2.1/os-server-external-events"


def schema_207() -> dict:
    schema = copy.deepcopy(resolve("server_external_events.create", "2.1"))
    schema["status_code"] = [207]
    return schema


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module")
async def cloud(tmp_path):
    """A cloud of the test's own (on the module's event loop, as the shared one below)."""
    harness = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    yield harness
    await stop_cloud(harness)


@pytest_asyncio.fixture(loop_scope="module")
async def server(cloud):
    server_id = await boot(cloud)
    await cloud.wait_status(server_id, "ACTIVE")
    return server_id


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def refusing(tmp_path_factory):
    """A cloud and its ACTIVE server shared by the tests whose requests are all refused: nothing
    they send is stored, so each finds the server's inbox as empty as the first did."""
    harness = await start_cloud(tmp_path_factory.mktemp("refusing"), fake_hosts=1, **QUICK)
    server_id = await boot(harness)
    await harness.wait_status(server_id, "ACTIVE")
    yield harness, server_id
    await stop_cloud(harness)


def plugged(server_id: str, tag: str | None = None, **extra) -> dict:
    event = {"name": "network-vif-plugged", "server_uuid": server_id, "status": "completed"}
    if tag is not None:
        event["tag"] = tag
    event.update(extra)
    return event


async def post(cloud, body, headers=SERVICE, **kwargs):
    r = await cloud.compute.post(URL, json=body, headers=headers, **kwargs)
    assert r.status_code < 500, r.text
    return r


async def inbox(cloud, server_id: str) -> list[InstanceExternalEvent]:
    async with cloud.rt.db.reader() as s:
        return list((await s.execute(select(InstanceExternalEvent).where(
            InstanceExternalEvent.instance_uuid == server_id))).scalars())


async def test_one_event_accepted(cloud, server):
    tag = str(uuid.uuid4())
    r = await post(cloud, {"events": [plugged(server, tag)]})
    body = assert_schema("server_external_events.create", r)
    assert body == {"events": [{"name": "network-vif-plugged", "server_uuid": server, "tag": tag,
                                "status": "completed", "code": 200}]}


async def test_accepted_event_is_stored_recorded_and_processed(cloud, server):
    tag = str(uuid.uuid4())
    r = await post(cloud, {"events": [plugged(server, tag)]})
    assert r.status_code == 200
    rows = await inbox(cloud, server)  # nobody waits: kept for a waiter of the same operation
    assert [(row.name, row.tag, row.status) for row in rows] == [("network-vif-plugged", tag, "completed")]
    # Recorded in the server's current action (as Nova, no action of its own): its create here.
    actions = await cloud.compute.get(f"/v2.1/servers/{server}/os-instance-actions")
    assert [a["action"] for a in actions.json()["instanceActions"]] == ["create"]
    accepted = [e for e in await action_events(cloud, server) if e["event"] == "api_external_instance_event"
                and tag in e["details"]]
    assert len(accepted) == 1 and accepted[0]["action"] == "create"
    assert accepted[0]["details"] == (f"network-vif-plugged-{tag} (completed) accepted, "
                                      f"request {r.headers['x-openstack-request-id']}")

    async def processed():
        return [e for e in await action_events(cloud, server) if e["event"] == "compute_external_instance_event"
                and e["details"].startswith(f"network-vif-plugged-{tag}")]
    done = await eventually(processed)
    assert done[0]["result"] == "Success" and "unexpected" in done[0]["details"]
    assert done[0]["action"] == "create"


async def test_mixed_batch_is_207_with_a_code_per_event(cloud, server):
    unknown = str(uuid.uuid4())
    r = await post(cloud, {"events": [plugged(server, "a"), plugged(unknown, "b"),
                                      {"name": "network-changed", "server_uuid": server, "tag": "c"}]})
    body = assert_schema(schema_207(), r)
    assert [(e["server_uuid"], e["code"], e["status"]) for e in body["events"]] == [
        (server, 200, "completed"), (unknown, 404, "failed"), (server, 200, "completed")]
    assert {row.tag for row in await inbox(cloud, server)} >= {"a"}  # the good ones went through


def assert_none_accepted(r) -> None:
    """Nova: a batch with no event accepted is 404 as a whole."""
    assert r.status_code == 404, r.text
    assert r.json() == {"itemNotFound": {"code": 404, "message": "No instances found for any event"}}


async def test_unknown_server_is_404_in_a_207(cloud, server):
    r = await post(cloud, {"events": [plugged(str(uuid.uuid4()), "x"), plugged(server, "y")]})
    body = assert_schema(schema_207(), r)
    assert body["events"][0]["code"] == 404 and body["events"][0]["status"] == "failed"
    assert body["events"][1]["code"] == 200


async def test_no_event_naming_a_known_server_is_404(refusing):
    cloud, _server = refusing
    assert_none_accepted(await post(cloud, {"events": [plugged(str(uuid.uuid4()), "x"),
                                                       plugged(str(uuid.uuid4()), "y")]}))


async def test_deleted_server_is_404(cloud, server):
    other = await boot(cloud)
    await cloud.wait_status(other, "ACTIVE")
    assert (await cloud.compute.delete(f"/v2.1/servers/{server}")).status_code == 204
    await cloud.wait_gone(server)
    r = await post(cloud, {"events": [plugged(server, "x"), plugged(other, "x")]})
    assert r.status_code == 207 and r.json()["events"][0]["code"] == 404
    assert_none_accepted(await post(cloud, {"events": [plugged(server, "x")]}))


async def test_server_on_no_host_is_422(cloud, server):
    other = await boot(cloud)
    await cloud.wait_status(other, "ACTIVE")
    await instance_obj.save(cloud.rt.db, server, {"host": None})
    r = await post(cloud, {"events": [plugged(server, "x"), plugged(other, "x")]})
    body = assert_schema(schema_207(), r)
    assert body["events"][0]["code"] == 422 and body["events"][0]["status"] == "failed"
    assert await inbox(cloud, server) == []
    assert_none_accepted(await post(cloud, {"events": [plugged(server, "x")]}))  # none accepted


async def test_duplicate_events_are_idempotent(cloud, server):
    event = plugged(server, "dup")
    r = await post(cloud, {"events": [event, event]})
    body = assert_schema("server_external_events.create", r)
    assert [e["code"] for e in body["events"]] == [200, 200]
    r = await post(cloud, {"events": [event]})
    assert r.status_code == 200
    assert [(row.name, row.tag) for row in await inbox(cloud, server)] == [("network-vif-plugged", "dup")]


async def test_status_defaults_to_completed_and_in_progress_is_accepted(cloud, server):
    r = await post(cloud, {"events": [{"name": "network-vif-unplugged", "server_uuid": server},
                                      plugged(server, "p", status="in-progress"),
                                      plugged(server, "f", status="failed")]})
    body = assert_schema("server_external_events.create", r)
    assert [e["code"] for e in body["events"]] == [200, 200, 200]
    assert "tag" not in body["events"][0]  # echoed as given
    stored = {row.tag: row.status for row in await inbox(cloud, server)}
    assert stored[""] == "completed" and stored["p"] == "in-progress" and stored["f"] == "failed"


async def test_admin_role_may_post_too(cloud, server):
    r = await post(cloud, {"events": [plugged(server, "adm")]},
                   headers={"X-Project-Id": "a" * 32, "X-Roles": "admin"})
    assert r.status_code == 200


async def test_caller_without_the_service_role_is_403(refusing):
    cloud, server = refusing
    r = await post(cloud, {"events": [plugged(server, "x")]}, headers=member())
    assert r.status_code == 403 and r.json()["forbidden"]["code"] == 403
    assert await inbox(cloud, server) == []


@pytest.mark.parametrize("body, fragment", [
    ({"events": []}, "Value: []"),
    ({}, "'events' is a required property"),
    ({"events": {}}, "is not of type 'array'"),
    ({"events": [{"name": "network-vif-plugged"}]}, "'server_uuid' is a required property"),
    ({"events": [{"server_uuid": "{server}"}]}, "'name' is a required property"),
    ({"events": [{"name": "network-vif-exploded", "server_uuid": "{server}"}]}, "is not one of"),
    ({"events": [{"name": "volume-extended", "server_uuid": "{server}", "tag": "v"}]}, "is not one of"),
    ({"events": [{"name": "network-changed", "server_uuid": "{server}", "status": "done"}]}, "is not one of"),
    ({"events": [{"name": "network-changed", "server_uuid": "not-a-uuid"}]}, "is not a 'uuid'"),
    ({"events": [{"name": "network-changed", "server_uuid": "{server}", "tag": "t" * 256}]}, "is too long"),
    ({"events": [{"name": "network-changed", "server_uuid": "{server}", "tag": 5}]}, "is not of type 'string'"),
    ({"events": [{"name": "network-changed", "server_uuid": "{server}", "code": 200}]},
     "Additional properties are not allowed"),
    ({"events": [], "extra": 1}, ""),
    ({"events": ["network-changed"]}, "is not of type 'object'"),
])
async def test_malformed_bodies_are_400(refusing, body, fragment):
    cloud, server = refusing
    import json
    body = json.loads(json.dumps(body).replace("{server}", server))
    r = await post(cloud, body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["badRequest"]["message"]
    assert await inbox(cloud, server) == []


async def test_not_json_and_empty_body_are_400(refusing):
    cloud, _server = refusing
    r = await post(cloud, None, content=b"{not json")
    assert r.status_code == 400
    r = await post(cloud, None, content=b"")
    assert r.status_code == 400


async def test_validation_comes_before_policy(refusing):
    cloud, _server = refusing
    # As Nova: the schema is checked first, so a malformed body is 400 even for a forbidden caller.
    r = await post(cloud, {"events": []}, headers=member())
    assert r.status_code == 400


async def test_wrong_method_is_405(refusing):
    cloud, _server = refusing
    r = await cloud.compute.get(URL, headers=SERVICE)
    assert r.status_code == 405


async def test_many_events_in_one_batch(cloud, server):
    events = [plugged(server, f"t{i}") for i in range(50)] + [plugged(str(uuid.uuid4()), "x")]
    r = await post(cloud, {"events": events})
    body = assert_schema(schema_207(), r)
    assert [e["code"] for e in body["events"]] == [200] * 50 + [404]
    assert len(await inbox(cloud, server)) == 50
