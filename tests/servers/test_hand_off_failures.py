"""A request whose hand-off to a host (or the conductor) fails leaves no task_state behind: the
API answers 503, the server is as it was (its task_state None again, nothing else half-done),
the action is recorded as failed, and the same request succeeds once the bus is back. A delete is
the exception: it is accepted, and its host finishes it."""

from __future__ import annotations

import pytest

from nefos import exceptions
from nefos.context import admin_context
from nefos.control.image import images
from tests.clouds import ADMIN, start_cloud, stop_cloud


class BrokenLink:
    """Makes the bus refuse every cast and call to ``topics`` while ``down`` (what the RabbitMQ
    bus raises when the broker is unreachable)."""

    def __init__(self, bus, topics: tuple[str, ...]):
        self.down = False
        self.topics = topics
        for name in ("cast", "call"):
            original = getattr(bus, name)
            setattr(bus, name, self._wrap(original))

    def _wrap(self, original):
        async def send(ctx, topic, method, *args, **kwargs):
            if self.down and topic in self.topics:
                raise exceptions.ServiceUnavailable(f"timed out sending to {topic}.{method}")
            return await original(ctx, topic, method, *args, **kwargs)
        return send


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2)
    harness.link = BrokenLink(harness.rt.bus, ("compute", "conductor"))
    yield harness
    await stop_cloud(harness)


async def _active_server(cloud) -> dict:
    net = await cloud.make_network()
    server = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]
    return await cloud.wait_status(server["id"], "ACTIVE")


async def _last_action(cloud, server_id: str) -> dict:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
    return r.json()["instanceActions"][0]


async def _fails_then_works(cloud, server_id: str, body: dict, status: str, action_name: str,
                            expect: int = 202) -> None:
    before = await cloud.server(server_id)
    cloud.link.down = True
    r = await cloud.compute.post(f"/v2.1/servers/{server_id}/action", json=body, headers=ADMIN)
    cloud.link.down = False
    assert r.status_code == 503, r.text
    after = await cloud.server(server_id)
    assert after["OS-EXT-STS:task_state"] is None, (body, after["OS-EXT-STS:task_state"])
    assert (after["status"], after["flavor"], after["image"]) == (before["status"], before["flavor"],
                                                                  before["image"]), body
    failed = await _last_action(cloud, server_id)
    assert failed["action"] == action_name and failed["message"] == "Error", failed
    await cloud.action(server_id, body, expect=expect)
    await cloud.wait_status(server_id, status)


@pytest.mark.parametrize("body, status, action_name", [
    ({"os-stop": None}, "SHUTOFF", "stop"),
    ({"reboot": {"type": "SOFT"}}, "ACTIVE", "reboot"),
    ({"reboot": {"type": "HARD"}}, "ACTIVE", "reboot"),
    ({"pause": None}, "PAUSED", "pause"),
    ({"suspend": None}, "SUSPENDED", "suspend"),
    ({"rebuild": {"imageRef": "DEFAULT"}}, "ACTIVE", "rebuild"),
    ({"shelve": None}, {"SHELVED", "SHELVED_OFFLOADED"}, "shelve"),
    ({"resize": {"flavorRef": "2"}}, "VERIFY_RESIZE", "resize"),
])
async def test_an_action_that_never_reaches_its_host_leaves_no_task_state(cloud, body, status, action_name):
    server = await _active_server(cloud)
    if "rebuild" in body:
        body = {"rebuild": {"imageRef": await cloud.default_image()}}
    await _fails_then_works(cloud, server["id"], body, status, action_name)


async def test_a_snapshot_that_never_reaches_its_host_leaves_no_image_either(cloud):
    server = await _active_server(cloud)
    cloud.link.down = True
    r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action",
                                 json={"createImage": {"name": "never"}}, headers=ADMIN)
    cloud.link.down = False
    assert r.status_code == 503, r.text
    assert (await cloud.server(server["id"]))["OS-EXT-STS:task_state"] is None
    listed = await images.list_images(cloud.rt, admin_context(), [("name", "never")])
    assert listed["images"] == [], listed


async def test_start_and_resize_steps_that_never_reach_the_host_leave_no_task_state(cloud):
    server = await _active_server(cloud)
    await cloud.action(server["id"], {"os-stop": None})
    await cloud.wait_status(server["id"], "SHUTOFF")
    await _fails_then_works(cloud, server["id"], {"os-start": None}, "ACTIVE", "start")
    await cloud.action(server["id"], {"resize": {"flavorRef": "2"}})
    await cloud.wait_status(server["id"], "VERIFY_RESIZE")
    await _fails_then_works(cloud, server["id"], {"revertResize": None}, "ACTIVE", "revertResize")
    await cloud.action(server["id"], {"resize": {"flavorRef": "2"}})
    await cloud.wait_status(server["id"], "VERIFY_RESIZE")
    await _fails_then_works(cloud, server["id"], {"confirmResize": None}, "ACTIVE", "confirmResize", expect=204)


async def _delete_while_the_link_is_down(cloud, server_id: str) -> None:
    cloud.link.down = True
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
    cloud.link.down = False
    assert r.status_code == 204, r.text  # a delete is idempotent: its host finishes it
    after = await cloud.server(server_id)
    assert (after["status"], after["OS-EXT-STS:task_state"]) == ("ACTIVE", "deleting")


async def test_a_delete_that_cannot_be_sent_to_the_host_is_accepted(cloud):
    """With the shipped defaults: accepted and marked deleting (the host finishes it after
    ``rpc_response_timeout``; the next test shows that with a short one)."""
    server = await _active_server(cloud)
    await _delete_while_the_link_is_down(cloud, server["id"])


async def test_a_delete_that_cannot_be_sent_to_the_host_is_finished_by_the_host(tmp_path):
    # A short rpc_response_timeout, so that the host's look for lost requests comes soon; not so
    # short that a build a loaded machine is slow to hand over is taken for a lost one.
    cloud = await start_cloud(tmp_path, fake_hosts=1, rpc_response_timeout=4.0)
    cloud.link = BrokenLink(cloud.rt.bus, ("compute",))
    try:
        server = await _active_server(cloud)
        await _delete_while_the_link_is_down(cloud, server["id"])
        await cloud.wait_gone(server["id"], timeout=20)
    finally:
        await stop_cloud(cloud)


async def test_a_delete_the_database_refused_leaves_no_open_action(cloud, monkeypatch):
    """A delete answered 503 because the database failed midway is not left as an action in
    progress for ever: it is recorded as failed, and the server is as it was."""
    from nefos.control.compute import api as compute_api
    server = await _active_server(cloud)
    original = compute_api.instance_obj.save

    async def failing(db, uuid, values, **kwargs):
        if values.get("task_state") == "deleting":
            raise exceptions.DatabaseUnavailable()
        return await original(db, uuid, values, **kwargs)

    monkeypatch.setattr(compute_api.instance_obj, "save", failing)
    r = await cloud.compute.delete(f"/v2.1/servers/{server['id']}", headers=ADMIN)
    monkeypatch.undo()
    assert r.status_code == 503, r.text
    action = await _last_action(cloud, server["id"])
    assert (action["action"], action["message"]) == ("delete", "Error"), action
    after = await cloud.server(server["id"])
    assert (after["status"], after["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
