"""Volume routes of a cloud without block storage: attachments read from the server (none), the
os-volumes / os-snapshots proxies empty (404 from 2.36)."""

from __future__ import annotations

import uuid

from tests.api.conftest import version
from tests.clouds import ADMIN, member


async def test_attachments(cloud):
    net = await cloud.make_network(shared=True)
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    base = f"/v2.1/servers/{sid}/os-volume_attachments"
    vol = str(uuid.uuid4())
    r = await cloud.compute.get(base, headers=member())
    assert r.status_code == 200 and r.json() == {"volumeAttachments": []}, r.text
    assert (await cloud.compute.get(base, headers=member(project="o" * 32))).status_code == 404
    assert (await cloud.compute.get(f"{base}?limit=x", headers=member())).status_code == 400
    assert (await cloud.compute.get(f"{base}?bogus=1", headers=version("2.75", member()))).status_code == 400
    r = await cloud.compute.get(f"{base}/{vol}", headers=member())
    assert r.status_code == 404 and "is not attached to volume" in r.text, r.text
    r = await cloud.compute.post(base, json={"volumeAttachment": {"volumeId": vol}}, headers=member())
    assert r.status_code == 404 and f"Volume {vol} could not be found." in r.text, r.text
    for body in ({}, {"volumeAttachment": {}}, {"volumeAttachment": {"volumeId": "x"}},
                 {"volumeAttachment": {"volumeId": vol, "device": "sda"}}):
        r = await cloud.compute.post(base, json=body, headers=member())
        assert r.status_code == 400 and "badRequest" in r.json(), (body, r.text)
    r = await cloud.compute.put(f"{base}/{vol}", json={"volumeAttachment": {"volumeId": vol}}, headers=member())
    assert r.status_code == 403, r.text  # before 2.85 a swap: the service's
    r = await cloud.compute.put(f"{base}/{vol}", json={"volumeAttachment": {"volumeId": vol}},
                                headers=version("2.85", member()))
    assert r.status_code == 404, r.text
    assert (await cloud.compute.delete(f"{base}/{vol}", headers=member())).status_code == 404
    r = await cloud.compute.get(base, headers=member(project="o" * 32))
    assert r.status_code == 404


async def test_proxies(cloud):
    for path, key in (("/v2.1/os-volumes", "volumes"), ("/v2.1/os-volumes/detail", "volumes"),
                      ("/v2.1/os-snapshots", "snapshots"), ("/v2.1/os-snapshots/detail", "snapshots")):
        r = await cloud.compute.get(path, headers=member())
        assert r.status_code == 200 and r.json() == {key: []}, r.text
        assert (await cloud.compute.get(path, headers=version("2.36", member()))).status_code == 404
    some = str(uuid.uuid4())
    for path in (f"/v2.1/os-volumes/{some}", f"/v2.1/os-snapshots/{some}"):
        assert (await cloud.compute.get(path, headers=member())).status_code == 404
        assert (await cloud.compute.delete(path, headers=member())).status_code == 404
    r = await cloud.compute.post("/v2.1/os-volumes", json={"volume": {"size": 1}}, headers=member())
    assert r.status_code == 403 and "Block storage is not available" in r.text, r.text
    assert (await cloud.compute.post("/v2.1/os-volumes", json={"volume": {}}, headers=member())).status_code == 400
    r = await cloud.compute.post("/v2.1/os-snapshots", json={"snapshot": {"volume_id": some}}, headers=member())
    assert r.status_code == 404, r.text


async def test_volumes_boot_is_the_servers_collection(cloud):
    net = await cloud.make_network(shared=True)
    image = await cloud.default_image()
    r = await cloud.compute.post("/v2.1/os-volumes_boot", headers=member(), json={"server": {
        "name": "vb", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}]}})
    assert r.status_code == 202, r.text
    sid = r.json()["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", headers=member())
    listed = (await cloud.compute.get("/v2.1/os-volumes_boot", headers=member())).json()["servers"]
    assert sid in [s["id"] for s in listed]
    detail = (await cloud.compute.get("/v2.1/os-volumes_boot/detail", headers=member())).json()["servers"]
    assert detail == (await cloud.compute.get("/v2.1/servers/detail", headers=member())).json()["servers"]
    shown = (await cloud.compute.get(f"/v2.1/os-volumes_boot/{sid}", headers=member())).json()["server"]
    assert shown["id"] == sid and shown["status"] == "ACTIVE"
    r = await cloud.compute.put(f"/v2.1/os-volumes_boot/{sid}", json={"server": {"name": "vb2"}}, headers=member())
    assert r.status_code == 200 and r.json()["server"]["name"] == "vb2", r.text
    r = await cloud.compute.post(f"/v2.1/os-volumes_boot/{sid}/action", json={"os-getConsoleOutput": {}},
                                 headers=member())
    assert r.status_code == 200, r.text
    assert (await cloud.compute.get(f"/v2.1/os-volumes_boot/{sid}", headers=member(project="o" * 32))).status_code \
        == 404
    assert (await cloud.compute.delete(f"/v2.1/os-volumes_boot/{sid}", headers=member())).status_code == 204
    await cloud.wait_gone(sid, headers=member())
