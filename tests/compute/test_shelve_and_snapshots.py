"""createImage, createBackup (rotation), shelve / shelveOffload / unshelve and changePassword through
the Compute API, checked through the Image API, the Networking API, the fake hypervisor and the
claims table: nothing left behind."""

from __future__ import annotations

import httpx
import pytest

from nefos.model import states
from nefos.http_client import verified_tls
from tests.compute.conftest import FAST, boot_active, eventually
from tests.noauth import ADMIN
from tests.clouds import start_cloud, stop_cloud

V245 = {"OpenStack-API-Version": "compute 2.45"}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2, **FAST)
    harness.images = httpx.AsyncClient(verify=verified_tls(),
                                       base_url=f"http://127.0.0.1:{harness.rt.cfg.image_api_port}", timeout=30,
                                       headers=ADMIN)
    yield harness
    await harness.images.aclose()
    await stop_cloud(harness)


async def _image(cloud, image_id: str) -> dict | None:
    r = await cloud.images.get(f"/v2/images/{image_id}")
    return None if r.status_code == 404 else r.json()


async def _active_image(cloud, image_id: str) -> dict:
    async def active():
        image = await _image(cloud, image_id)
        return image is not None and image["status"] == "active"
    await eventually(active, timeout=10)
    return await _image(cloud, image_id)


async def _action_names(cloud, server_id: str) -> list[str]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    return [a["action"] for a in r.json()["instanceActions"]]


async def test_create_image_makes_an_image_with_the_guests_disk(cloud):
    (server_id,) = await boot_active(cloud)
    r = await cloud.action(server_id, {"createImage": {"name": "snap", "metadata": {"purpose": "test"}}},
                           headers=V245)
    image_id = r.json()["image_id"]
    image = await _active_image(cloud, image_id)
    assert (image["name"], image["instance_uuid"], image["image_type"], image["purpose"]) == (
        "snap", server_id, "snapshot", "test")
    data = (await cloud.images.get(f"/v2/images/{image_id}/file")).content
    assert server_id.encode() in data  # the fake hypervisor's disk of this guest
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert server["OS-EXT-STS:task_state"] is None
    assert "createImage" in await _action_names(cloud, server_id)
    events = [n["event_type"] for n in cloud.notifications
              if n["payload"]["nova_object.data"]["uuid"] == server_id]
    assert "instance.snapshot.start" in events and "instance.snapshot.end" in events
    # Before 2.45 the answer is a Location header and no body.
    r = await cloud.action(server_id, {"createImage": {"name": "snap2"}})
    assert r.headers["Location"].endswith("/v2.1/images/" + r.headers["Location"].rsplit("/", 1)[1])
    await _active_image(cloud, r.headers["Location"].rsplit("/", 1)[1])


async def test_create_backup_keeps_the_newest_rotation_backups(cloud):
    (server_id,) = await boot_active(cloud)
    ids = []
    for i in range(3):
        r = await cloud.action(server_id, {"createBackup": {"name": f"b{i}", "backup_type": "daily",
                                                            "rotation": 2}}, headers=V245)
        ids.append(r.json()["image_id"])
        await cloud.wait_status(server_id, "ACTIVE")
    assert await _image(cloud, ids[0]) is None or (await _image(cloud, ids[0]))["status"] == "deleted"
    for image_id in ids[1:]:
        image = await _active_image(cloud, image_id)
        assert (image["backup_type"], image["image_type"]) == ("daily", "backup")
    # rotation 0: every backup of the type goes, the new one included; no Location before 2.45.
    r = await cloud.action(server_id, {"createBackup": {"name": "b3", "backup_type": "daily", "rotation": "0"}})
    assert "Location" not in r.headers
    await cloud.wait_status(server_id, "ACTIVE")
    listed = (await cloud.images.get("/v2/images", params={"backup_type": "daily"})).json()["images"]
    assert listed == []


@pytest.mark.parametrize("body", [
    {"createImage": {}}, {"createImage": {"name": ""}}, {"createImage": {"name": "x", "metadata": "no"}},
    {"createBackup": {"name": "x", "backup_type": "daily", "rotation": -1}},
    {"createBackup": {"name": "x", "backup_type": "daily"}},
    {"createBackup": {"name": "x", "backup_type": "daily", "rotation": "two"}},
    {"shelve": {"force": True}}, {"changePassword": {}}, {"changePassword": {"adminPass": 1}},
])
async def test_bad_image_and_shelve_requests_are_400(cloud, body):
    (server_id,) = await boot_active(cloud)
    r = await cloud.action(server_id, body, expect=400)
    assert "badRequest" in r.json()
    assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] is None
    listed = (await cloud.images.get("/v2/images", params={"instance_uuid": server_id})).json()["images"]
    assert listed == []


async def test_shelve_offloads_and_unshelve_brings_it_back(cloud):
    (server_id,) = await boot_active(cloud)
    port = (await cloud.ports(device_id=server_id))[0]
    old_host = (await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"]
    await cloud.action(server_id, {"shelve": None})
    server = await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
    assert server["OS-EXT-SRV-ATTR:host"] is None and server["OS-EXT-STS:power_state"] == states.NOSTATE
    assert server_id not in cloud.driver(old_host).guests
    assert (await cloud.hypervisor_usage())["allocations"] == 0
    (unbound,) = await cloud.ports(device_id=server_id)
    assert (unbound["id"], unbound["binding:host_id"]) == (port["id"], "")
    shelved = (await cloud.images.get("/v2/images", params={"name": "vm0-shelved"})).json()["images"]
    assert len(shelved) == 1 and shelved[0]["status"] == "active"
    # Already shelved: 409; the server stays as it is.
    await cloud.action(server_id, {"shelve": None}, expect=409)

    await cloud.action(server_id, {"unshelve": None})
    server = await cloud.wait_status(server_id, "ACTIVE")
    host = server["OS-EXT-SRV-ATTR:host"]
    assert host in cloud.hosts and cloud.driver(host).guests[server_id].power_state == states.RUNNING
    (bound,) = await cloud.ports(device_id=server_id)
    assert (bound["id"], bound["binding:host_id"], bound["fixed_ips"]) == (port["id"], host, port["fixed_ips"])
    await eventually(lambda: _port_status(cloud, port["id"], "ACTIVE"), timeout=5)
    assert (await cloud.hypervisor_usage())["allocations"] == 1
    assert await _image(cloud, shelved[0]["id"]) is None or (await _image(cloud, shelved[0]["id"]))["status"] == "deleted"
    assert {"shelve", "unshelve"} <= set(await _action_names(cloud, server_id))
    await cloud.action(server_id, {"unshelve": None}, expect=409)  # not shelved


async def _port_status(cloud, port_id: str, status: str) -> bool:
    r = await cloud.network.get(f"/v2.0/ports/{port_id}")
    return r.json()["port"]["status"] == status


async def test_shelve_without_offload_keeps_the_host_until_shelve_offload(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, shelved_offload_time=-1, **FAST)
    try:
        (server_id,) = await boot_active(cloud)
        host = (await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"]
        await cloud.action(server_id, {"shelve": None})
        server = await cloud.wait_status(server_id, "SHELVED")
        assert server["OS-EXT-SRV-ATTR:host"] == host
        assert cloud.driver(host).guests[server_id].power_state == states.SHUTDOWN
        await cloud.action(server_id, {"unshelve": None})
        await cloud.wait_status(server_id, "ACTIVE")
        assert cloud.driver(host).guests[server_id].power_state == states.RUNNING
        # Shelve again, then offload by hand.
        await cloud.action(server_id, {"shelve": None})
        await cloud.wait_status(server_id, "SHELVED")
        await cloud.action(server_id, {"shelveOffload": None})
        server = await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
        assert server_id not in cloud.driver(host).guests
        assert (await cloud.hypervisor_usage())["allocations"] == 0
    finally:
        await stop_cloud(cloud)


async def test_deleting_a_shelved_offloaded_server_leaves_nothing(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"shelve": None})
    await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
    (image,) = (await cloud.images.get("/v2/images", params={"instance_uuid": server_id})).json()["images"]
    assert (await cloud.compute.delete(f"/v2.1/servers/{server_id}")).status_code == 204
    await cloud.wait_gone(server_id)
    assert await cloud.ports(device_id=server_id) == []
    assert (await _image(cloud, image["id"]) or {"status": "deleted"})["status"] == "deleted"


async def test_unshelve_with_no_valid_host_stays_offloaded_with_a_fault(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"shelve": None})
    await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
    for host in cloud.hosts:
        r = await cloud.compute.put("/v2.1/os-services/disable", json={"host": host, "binary": "nova-compute"})
        assert r.status_code == 200, r.text
    r = await cloud.action(server_id, {"unshelve": None})
    request_id = r.headers["x-openstack-request-id"]
    event = await eventually(lambda: _finished_event(cloud, server_id, request_id), timeout=10)
    # As Nova: the server stays offloaded (no fault shown outside ERROR), the action says why.
    assert (event["event"], event["result"]) == ("conductor_unshelve_instance", "Error")
    assert "NoValidHost" in event["traceback"]
    server = await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
    assert server["OS-EXT-SRV-ATTR:host"] is None
    assert (await cloud.hypervisor_usage())["allocations"] == 0


async def _finished_event(cloud, server_id: str, request_id: str):
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}",
                                headers={"OpenStack-API-Version": "compute 2.47"})
    events = r.json()["instanceAction"].get("events") or []
    return next((e for e in events if e["finish_time"]), None)


async def test_change_password_reaches_the_guest(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"changePassword": {"adminPass": "s3cret"}})
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert cloud.driver(server["OS-EXT-SRV-ATTR:host"]).guests[server_id].admin_password == "s3cret"
    assert "changePassword" in await _action_names(cloud, server_id)
    await cloud.action(server_id, {"os-stop": None})
    await cloud.wait_status(server_id, "SHUTOFF")
    await cloud.action(server_id, {"changePassword": {"adminPass": "x"}}, expect=409)


async def test_unknown_server_is_404_for_each_new_action(cloud):
    missing = "00000000-0000-0000-0000-000000000000"
    for body in ({"shelve": None}, {"unshelve": None}, {"shelveOffload": None},
                 {"createImage": {"name": "x"}}, {"createBackup": {"name": "x", "backup_type": "d", "rotation": 1}},
                 {"changePassword": {"adminPass": "x"}}):
        await cloud.action(missing, body, expect=404)
