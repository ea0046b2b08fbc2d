"""Versioned notifications on the bus: create, delete, power off/on, reboot (start and end),
each carrying the request id of the API call that caused it and the instance's uuid.
"""

from __future__ import annotations

import asyncio
import time

from tests.clouds import member


async def _wait_for(cloud, request_id: str, *event_types: str, timeout: float = 10) -> list[dict]:
    """The notifications of ``request_id`` once all of ``event_types`` have arrived."""
    deadline = time.monotonic() + timeout
    while True:
        mine = [n for n in cloud.notifications if n["request_id"] == request_id]
        if set(event_types) <= {n["event_type"] for n in mine}:
            return mine
        assert time.monotonic() < deadline, (event_types, [n["event_type"] for n in mine])
        await asyncio.sleep(0.02)


def _check(notification: dict, server_id: str, *, project: str | None = None) -> dict:
    assert notification["priority"] == "INFO"
    assert notification["message_id"] and notification["timestamp"]
    payload = notification["payload"]
    assert payload["nova_object.name"] == "InstanceActionPayload"
    data = payload["nova_object.data"]
    assert data["uuid"] == server_id
    if project:
        assert data["tenant_id"] == project
    return data


async def test_lifecycle_notifications_carry_request_id_and_instance(cloud):
    headers = member()
    net = await cloud.make_network(headers=headers)
    r = await cloud.compute.post("/v2.1/servers", headers=headers, json={"server": {
        "name": "noisy", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}]}})
    assert r.status_code == 202, r.text
    server_id = r.json()["server"]["id"]
    create_req = r.headers["x-openstack-request-id"]
    server = await cloud.wait_status(server_id, "ACTIVE", headers=headers)
    host = server["OS-EXT-SRV-ATTR:host"] if "OS-EXT-SRV-ATTR:host" in server else None

    got = await _wait_for(cloud, create_req, "instance.create.start", "instance.create.end")
    start = next(n for n in got if n["event_type"] == "instance.create.start")
    end = next(n for n in got if n["event_type"] == "instance.create.end")
    assert got.index(start) < got.index(end)
    data = _check(start, server_id, project=headers["X-Project-Id"])
    assert data["state"] == "building"
    data = _check(end, server_id, project=headers["X-Project-Id"])
    assert data["state"] == "active" and data["power_state"] == "running"
    assert data["host"] and end["publisher_id"] == f"nova-compute:{data['host']}"
    assert host in (None, data["host"])

    for action, events, final in (
            ({"os-stop": None}, ("instance.power_off.start", "instance.power_off.end"), "SHUTOFF"),
            ({"os-start": None}, ("instance.power_on.start", "instance.power_on.end"), "ACTIVE"),
            ({"reboot": {"type": "SOFT"}}, ("instance.reboot.start", "instance.reboot.end"), "ACTIVE"),
            ({"reboot": {"type": "HARD"}}, ("instance.reboot.start", "instance.reboot.end"), "ACTIVE")):
        r = await cloud.action(server_id, action, headers=headers)
        request_id = r.headers["x-openstack-request-id"]
        got = await _wait_for(cloud, request_id, *events)
        assert [n["event_type"] for n in got] == list(events), got
        for n in got:
            _check(n, server_id)
        await cloud.wait_status(server_id, final, headers=headers)
    data = _check(next(n for n in cloud.notifications if n["event_type"] == "instance.power_off.end"), server_id)
    assert data["state"] == "stopped" and data["power_state"] == "shutdown"

    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=headers)
    assert r.status_code == 204
    delete_req = r.headers["x-openstack-request-id"]
    got = await _wait_for(cloud, delete_req, "instance.delete.start", "instance.delete.end")
    assert [n["event_type"] for n in got] == ["instance.delete.start", "instance.delete.end"]
    assert _check(got[-1], server_id)["state"] == "deleted"
    await cloud.wait_gone(server_id, headers=headers)
    # Every notification about this server came from one of the requests above.
    requests = {create_req, delete_req}
    assert all(n["request_id"] for n in cloud.notifications
               if n["payload"]["nova_object.data"]["uuid"] == server_id)
    assert requests <= {n["request_id"] for n in cloud.notifications}


async def test_deleting_a_server_that_never_reached_a_host_notifies_too(cloud):
    """A server in ERROR without a host is deleted by the API itself: it still announces it."""
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
        "name": "huge", "id": "huge", "ram": 256, "vcpus": 1, "disk": 5000}})  # no host has the disk
    assert r.status_code == 200, r.text
    net = await cloud.make_network()
    server_id = (await cloud.boot(flavor="huge", networks=[{"uuid": net["id"]}]))["server"]["id"]
    server = await cloud.wait_status(server_id, "ERROR")
    assert server["OS-EXT-SRV-ATTR:host"] is None
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    got = await _wait_for(cloud, r.headers["x-openstack-request-id"], "instance.delete.start",
                          "instance.delete.end")
    assert [n["event_type"] for n in got] == ["instance.delete.start", "instance.delete.end"]
    for n in got:
        _check(n, server_id)
    await cloud.wait_gone(server_id)


async def test_failed_build_notifies_create_error(cloud):
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
        "name": "net-fail", "id": "net-fail", "ram": 256, "vcpus": 1, "disk": 1}})
    assert r.status_code == 200
    net = await cloud.make_network()
    manager = next(c for c in cloud.cloud.components if c.name == "network").manager

    async def broken(ctx, port):
        raise RuntimeError("no ports today")
    manager.create_port = broken
    try:
        r = await cloud.compute.post("/v2.1/servers", json={"server": {
            "name": "doomed", "imageRef": await cloud.default_image(), "flavorRef": "net-fail",
            "networks": [{"uuid": net["id"]}]}})
        server_id = r.json()["server"]["id"]
        await cloud.wait_status(server_id, "ERROR")
        got = await _wait_for(cloud, r.headers["x-openstack-request-id"], "instance.create.start",
                              "instance.create.error")
        error = next(n for n in got if n["event_type"] == "instance.create.error")
        assert error["priority"] in ("INFO", "ERROR")
        assert error["payload"]["nova_object.data"]["uuid"] == server_id
        assert "instance.create.end" not in [n["event_type"] for n in got]
    finally:
        del manager.create_port
