"""Rebuild through the Compute API: a new guest from the new image, the same ports and IPs, the
server's state kept (stopped stays stopped, ERROR comes back ACTIVE), bad input 400, wrong state 409."""

from __future__ import annotations

import pytest

from nefos.model import states
from tests.compute.conftest import boot_active
from tests.events.conftest import action_events


async def _second_image(cloud) -> str:
    from nefos.context import admin_context
    from nefos.control.image import images
    default = await cloud.default_image()
    row = await images.create(cloud.rt, admin_context(), {"name": "other", "disk_format": "raw",
                                                          "container_format": "bare", "visibility": "public"})

    async def data():
        yield b"another image"
    await images.upload(cloud.rt, admin_context(), row.id, data())
    assert row.id != default
    return row.id


async def test_rebuild_spawns_a_new_guest_from_the_new_image_keeping_ports(cloud):
    (server_id,) = await boot_active(cloud)
    image = await _second_image(cloud)
    before = await cloud.server(server_id)
    (port,) = await cloud.ports(device_id=server_id)
    driver = cloud.driver(before["OS-EXT-SRV-ATTR:host"])
    old_guest = driver.guests[server_id]
    r = await cloud.action(server_id, {"rebuild": {"imageRef": image, "name": "rebuilt",
                                                   "metadata": {"k": "v"}, "adminPass": "pw"}})
    body = r.json()["server"]
    assert (body["name"], body["image"]["id"], body["metadata"], body["adminPass"]) == ("rebuilt", image,
                                                                                       {"k": "v"}, "pw")
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert server["image"]["id"] == image and server["addresses"] == before["addresses"]
    assert driver.guests[server_id] is not old_guest and driver.guests[server_id].power_state == states.RUNNING
    (after,) = await cloud.ports(device_id=server_id)
    assert [after[k] for k in ("id", "mac_address", "fixed_ips", "binding:host_id")] == [
        port[k] for k in ("id", "mac_address", "fixed_ips", "binding:host_id")]
    events = [e["event"] for e in await action_events(cloud, server_id) if e["action"] == "rebuild"]
    assert "compute_rebuild_instance" in events and "compute_wait_for_vif_plugged" in events
    types = [n["event_type"] for n in cloud.notifications if n["payload"]["nova_object.data"]["uuid"] == server_id]
    assert "instance.rebuild.start" in types and "instance.rebuild.end" in types
    assert (await cloud.hypervisor_usage())["allocations"] == 1


async def test_a_stopped_server_is_rebuilt_stopped_and_an_error_server_comes_back_active(cloud):
    ids = await boot_active(cloud, count=2)
    await cloud.action(ids[0], {"os-stop": None})
    await cloud.wait_status(ids[0], "SHUTOFF")
    await cloud.action(ids[0], {"rebuild": {"imageRef": await cloud.default_image()}})
    server = await cloud.wait_status(ids[0], "SHUTOFF")
    assert cloud.driver(server["OS-EXT-SRV-ATTR:host"]).guests[ids[0]].power_state == states.SHUTDOWN
    await cloud.action(ids[1], {"os-resetState": {"state": "error"}})
    await cloud.wait_status(ids[1], "ERROR")
    await cloud.action(ids[1], {"rebuild": {"imageRef": await cloud.default_image()}})
    await cloud.wait_status(ids[1], "ACTIVE")


@pytest.mark.parametrize("args, code", [
    ({}, 400), ({"imageRef": ""}, 400), ({"imageRef": "00000000-0000-0000-0000-000000000000"}, 400),
    ({"imageRef": "IMAGE", "name": ""}, 400), ({"imageRef": "IMAGE", "unknown": 1}, 400),
    ({"imageRef": "IMAGE", "accessIPv4": "not-an-ip"}, 400),
])
async def test_bad_rebuild_requests(cloud, args, code):
    (server_id,) = await boot_active(cloud)
    if args.get("imageRef") == "IMAGE":
        args = dict(args, imageRef=await cloud.default_image())
    r = await cloud.action(server_id, {"rebuild": args}, expect=code)
    assert "badRequest" in r.json()
    assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] is None


async def test_rebuild_in_a_wrong_state_is_409_and_unknown_server_404(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"pause": None})
    await cloud.wait_status(server_id, "PAUSED")
    await cloud.action(server_id, {"rebuild": {"imageRef": await cloud.default_image()}}, expect=409)
    await cloud.action("00000000-0000-0000-0000-000000000000",
                       {"rebuild": {"imageRef": await cloud.default_image()}}, expect=404)
