"""createImage's answer names an image the Compute API's image proxy finds, and the snapshot goes
ACTIVE there, with its server; another project never sees it."""

from __future__ import annotations

from tests.compute.conftest import eventually
from tests.clouds import DEMO_PROJECT, member

MEMBER = member()


async def _status(cloud, image_id: str, headers=MEMBER) -> str:
    r = await cloud.compute.get(f"/v2.1/images/{image_id}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["image"]["status"]


async def test_snapshots_are_found_through_the_proxy(cloud):
    net = await cloud.make_network(shared=True)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=MEMBER))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")

    # Below 2.45 the image is in the Location header.
    r = await cloud.action(server_id, {"createImage": {"name": "snap-1", "metadata": {"k": "v"}}}, headers=MEMBER)
    location = r.headers["Location"]
    assert "/v2.1/images/" in location
    first = location.rsplit("/", 1)[-1]
    await eventually(lambda: _active(cloud, first), timeout=15)
    await cloud.wait_status(server_id, "ACTIVE")
    # From 2.45 it is in the body.
    r = await cloud.action(server_id, {"createImage": {"name": "snap-2"}},
                           headers={**MEMBER, "OpenStack-API-Version": "compute 2.45"})
    second = r.json()["image_id"]
    await eventually(lambda: _active(cloud, second), timeout=15)

    image = (await cloud.compute.get(f"/v2.1/images/{first}", headers=MEMBER)).json()["image"]
    assert image["name"] == "snap-1" and image["progress"] == 100
    assert image["server"]["id"] == server_id
    assert image["metadata"]["k"] == "v" and image["metadata"]["image_type"] == "snapshot"
    assert image["OS-EXT-IMG-SIZE:size"] > 0

    listed = (await cloud.compute.get(f"/v2.1/images?server={server_id}", headers=MEMBER)).json()["images"]
    assert {i["id"] for i in listed} == {first, second}
    snapshots = (await cloud.compute.get("/v2.1/images/detail?type=snapshot", headers=MEMBER)).json()["images"]
    assert {first, second} <= {i["id"] for i in snapshots}

    other = member(project="e" * 32)
    r = await cloud.compute.get(f"/v2.1/images/{first}", headers=other)
    assert r.status_code == 404
    r = await cloud.compute.get(f"/v2.1/images?server={server_id}", headers=other)
    assert r.json()["images"] == []

    r = await cloud.compute.delete(f"/v2.1/images/{second}", headers=MEMBER)
    assert r.status_code == 204, r.text
    assert (await cloud.compute.get(f"/v2.1/images/{second}", headers=MEMBER)).status_code == 404


async def test_create_image_metadata_quota_below_239(cloud):
    net = await cloud.make_network(shared=True)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=MEMBER))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")
    r = await cloud.compute.put(f"/v2.1/os-quota-sets/{DEMO_PROJECT}", json={"quota_set": {"metadata_items": 1}})
    assert r.status_code == 200, r.text
    metadata = {"a": "1", "b": "2"}
    r = await cloud.action(server_id, {"createImage": {"name": "big", "metadata": metadata}},
                           expect=403, headers=MEMBER)
    assert r.json()["forbidden"]["message"] == "Image metadata limit exceeded"
    r = await cloud.action(server_id, {"createImage": {"name": "big", "metadata": metadata}},
                           headers={**MEMBER, "OpenStack-API-Version": "compute 2.39"})
    assert r.status_code == 202, r.text


async def _active(cloud, image_id: str) -> bool:
    return await _status(cloud, image_id) == "ACTIVE"
