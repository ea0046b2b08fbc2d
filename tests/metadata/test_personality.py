"""Personality (injected files, before 2.57) as Nova takes it on create and rebuild: validated,
held to the injected-file quotas (403), and handed to the guest as Nova's metadata does:
``files`` in meta_data.json and each file under ``openstack/content/NNNN``, on the config drive and
from the metadata service."""

from __future__ import annotations

import base64
import json

from nefos.host.virt import configdrive
from tests.metadata.conftest import boot_described, mdcloud  # noqa: F401
from tests.clouds import ADMIN

HOST = "host-1"
AT_256 = {**ADMIN, "OpenStack-API-Version": "compute 2.56"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_injected_files_reach_the_config_drive_and_the_metadata_service(mdcloud):
    cloud = mdcloud
    personality = [{"path": "/etc/motd", "contents": _b64("hello\n")},
                   {"path": "/root/notes.txt", "contents": _b64("second file")}]
    server, _keypair = await boot_described(cloud, name="pers", config_drive=True, personality=personality)
    files = configdrive.read_files(cloud.driver(HOST).config_drives[server["id"]]["image"])
    meta = json.loads(files["openstack/latest/meta_data.json"])
    assert meta["files"] == [{"path": "/etc/motd", "content_path": "/content/0000"},
                             {"path": "/root/notes.txt", "content_path": "/content/0001"}]
    assert files["openstack/content/0000"] == b"hello\n"
    assert files["openstack/content/0001"] == b"second file"

    served = (await cloud.proxy.fetch(server, "/openstack/latest/meta_data.json")).json()
    assert served["files"] == meta["files"]
    assert (await cloud.proxy.fetch(server, "/openstack/content/0001")).content == b"second file"
    await cloud.proxy.fetch(server, "/openstack/content", expect=404)  # no listing, as Nova
    await cloud.proxy.fetch(server, "/openstack/content/0002", expect=404)


async def test_rebuild_replaces_the_injected_files(mdcloud):
    cloud = mdcloud
    server, _keypair = await boot_described(cloud, name="pers-rb", personality=[
        {"path": "/a", "contents": _b64("old")}])
    sid = server["id"]
    image = await cloud.default_image()
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", headers=AT_256, json={"rebuild": {
        "imageRef": image, "personality": [{"path": "rebuild.txt", "contents": _b64("new")}]}})
    assert r.status_code == 202, r.text
    await cloud.wait_status(sid, "ACTIVE")
    served = (await cloud.proxy.fetch(server, "/openstack/latest/meta_data.json")).json()
    assert served["files"] == [{"path": "rebuild.txt", "content_path": "/content/0000"}]
    assert (await cloud.proxy.fetch(server, "/openstack/content/0000")).content == b"new"
    # A rebuild without personality injects nothing (Nova's files_to_inject default).
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", headers=AT_256,
                                 json={"rebuild": {"imageRef": image}})
    assert r.status_code == 202, r.text
    await cloud.wait_status(sid, "ACTIVE")
    assert "files" not in (await cloud.proxy.fetch(server, "/openstack/latest/meta_data.json")).json()


async def test_personality_is_validated_and_held_to_the_quotas(mdcloud):
    cloud = mdcloud
    net = await cloud.make_network(name="pq", cidr="10.19.0.0/24")
    image = await cloud.default_image()

    async def create(personality, version="2.56"):
        headers = {**ADMIN, "OpenStack-API-Version": f"compute {version}"}
        return await cloud.compute.post("/v2.1/servers", headers=headers,
                                        json={"server": {"name": "p", "imageRef": image, "flavorRef": "1",
                                                         "networks": [{"uuid": net["id"]}],
                                                         "personality": personality}})

    for bad in ([{"path": "/x", "contents": "not base64!"}], [{"path": "/x"}], [{"contents": _b64("x")}],
                [{"path": "/x", "contents": _b64("x"), "mode": "0600"}], ["/x"], {"path": "/x"}):
        r = await create(bad)
        assert r.status_code == 400, (bad, r.text)
        assert "badRequest" in r.json()
    r = await create([{"path": "/x", "contents": _b64("x")}], version="2.57")  # gone from 2.57
    assert r.status_code == 400

    too_many = [{"path": f"/f{i}", "contents": _b64("x")} for i in range(6)]  # Nova's default limit: 5
    r = await create(too_many)
    assert r.status_code == 403 and r.json()["forbidden"]["message"] == "Personality file limit exceeded"
    r = await create([{"path": "/" + "p" * 255, "contents": _b64("x")}])
    assert r.status_code == 403
    assert r.json()["forbidden"]["message"] == "Personality file path exceeds maximum 255"
    r = await create([{"path": "/big", "contents": _b64("x" * 8000)}])  # 10668 base64 bytes > 10240
    assert r.status_code == 403
    assert r.json()["forbidden"]["message"] == "Personality file content exceeds maximum 10240"

    r = await create([{"path": f"/f{i}", "contents": _b64("x")} for i in range(5)])
    assert r.status_code == 202, r.text
    sid = r.json()["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", headers=AT_256, json={"rebuild": {
        "imageRef": image, "personality": too_many}})
    assert r.status_code == 403, r.text
    assert (await cloud.server(sid))["OS-EXT-STS:task_state"] is None
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", headers=AT_256, json={"rebuild": {
        "imageRef": image, "personality": [{"path": "/x", "contents": "%%%"}]}})
    assert r.status_code == 400, r.text
