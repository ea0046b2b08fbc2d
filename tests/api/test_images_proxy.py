"""Nova's image proxy (``/v2.1/images`` and their metadata) over the Image service, in process:
the views, filters and paging, each project seeing only what the Image service shows it, the
metadata quota, and the microversions the proxy stops at."""

from __future__ import annotations

import uuid

import pytest

from nefos.context import RequestContext
from nefos.control.image import images
from tests.api.conftest import PROJECT, USER, member, version
from tests.schemas import assert_schema

OTHER = "o" * 32


def _ctx(project: str = PROJECT, user: str = USER) -> RequestContext:
    return RequestContext(project_id=project, user_id=user, roles=["member", "reader"], is_admin=False)


async def _image(rt, *, project: str = PROJECT, upload: bool = True, **body) -> str:
    """An image owned by ``project``: uploaded (active) unless ``upload`` is false (queued)."""
    body = {"name": "img", "disk_format": "raw", "container_format": "bare", "visibility": "private", **body}
    row = await images.create(rt, _ctx(project), body)
    if upload:
        async def data():
            yield b"*" * 1024
        await images.upload(rt, _ctx(project), row.id, data())
    return row.id


async def test_show_is_nova_view_of_the_image(rt, client):
    server = str(uuid.uuid4())
    image_id = await _image(rt, name="snap", min_ram=64, min_disk=1, instance_uuid=server,
                            image_type="snapshot", auto_disk_config="true")
    r = await client.get(f"/v2.1/images/{image_id}", headers=member())
    body = assert_schema("images.get_image", r)["image"]
    assert body["id"] == image_id and body["name"] == "snap"
    assert (body["status"], body["progress"]) == ("ACTIVE", 100)
    assert (body["minRam"], body["minDisk"], body["OS-EXT-IMG-SIZE:size"]) == (64, 1, 1024)
    assert body["metadata"] == {"instance_uuid": server, "image_type": "snapshot", "auto_disk_config": "true"}
    assert body["OS-DCF:diskConfig"] == "AUTO"
    assert body["server"]["id"] == server
    assert [link["rel"] for link in body["server"]["links"]] == ["self", "bookmark"]
    rels = {link["rel"]: link for link in body["links"]}
    assert rels["self"]["href"].endswith(f"/v2.1/images/{image_id}")
    assert rels["bookmark"]["href"].endswith(f"/images/{image_id}")
    assert rels["alternate"]["type"] == "application/vnd.openstack.image"
    assert rels["alternate"]["href"].endswith(f":{rt.cfg.image_api_port}/images/{image_id}")
    assert body["created"].endswith("Z") and body["updated"].endswith("Z")


async def test_a_queued_image_is_saving_without_size_or_server(rt, client):
    image_id = await _image(rt, upload=False)
    body = (await client.get(f"/v2.1/images/{image_id}", headers=member())).json()["image"]
    assert (body["status"], body["progress"], body["OS-EXT-IMG-SIZE:size"]) == ("SAVING", 25, 0)
    assert "server" not in body and "OS-DCF:diskConfig" not in body


async def test_another_projects_private_image_is_not_found(rt, client):
    image_id = await _image(rt, project=OTHER)
    for path in (f"/v2.1/images/{image_id}", f"/v2.1/images/{image_id}/metadata"):
        r = await client.get(path, headers=member())
        assert r.status_code == 404, r.text
        assert r.json()["itemNotFound"]["message"] == "Image not found."
    listed = (await client.get("/v2.1/images", headers=member())).json()["images"]
    assert image_id not in [i["id"] for i in listed]
    r = await client.delete(f"/v2.1/images/{image_id}", headers=member())
    assert r.status_code == 404, r.text


async def test_list_and_detail_with_nova_filters(rt, client):
    server = str(uuid.uuid4())
    plain = await _image(rt, name="plain", min_ram=128)
    snap = await _image(rt, name="snap", instance_uuid=server, image_type="snapshot", min_disk=2)
    queued = await _image(rt, name="queued", upload=False)

    async def ids(query: str, detail: bool = False) -> list[str]:
        path = "/v2.1/images/detail" if detail else "/v2.1/images"
        r = await client.get(f"{path}?{query}", headers=member())
        assert_schema("images.list_images_details" if detail else "images.list_images", r)
        return [i["id"] for i in r.json()["images"]]

    assert set(await ids("")) == {plain, snap, queued}
    assert set(await ids("status=ACTIVE", detail=True)) == {plain, snap}
    assert await ids("status=SAVING") == []  # Nova lower-cases it: the Image service has no "saving" one
    assert await ids("name=plain") == [plain]
    assert await ids(f"server={server}") == [snap]
    assert await ids(f"server=http://nefos/v2.1/servers/{server}", detail=True) == [snap]
    assert await ids("type=snapshot") == [snap]
    assert await ids("minRam=128") == [plain]
    assert await ids("minDisk=2") == [snap]
    assert await ids("property-image_type=snapshot") == [snap]
    assert set(await ids("changes-since=2000-01-01T00:00:00Z")) == {plain, snap, queued}
    assert await ids("changes-since=2999-01-01T00:00:00Z") == []


async def test_paging_with_limit_marker_and_next_link(rt, client):
    made = [await _image(rt, name=f"page{i}") for i in range(3)]
    r = await client.get("/v2.1/images/detail?limit=2", headers=member())
    first = assert_schema("images.list_images_details", r)
    assert len(first["images"]) == 2
    (link,) = first["images_links"]
    assert link["rel"] == "next" and f"marker={first['images'][-1]['id']}" in link["href"]
    assert "/v2.1/images/detail?" in link["href"]
    rest = (await client.get(f"/v2.1/images/detail?limit=2&marker={first['images'][-1]['id']}",
                             headers=member())).json()
    assert "images_links" not in rest
    assert {i["id"] for i in first["images"] + rest["images"]} == set(made)


@pytest.mark.parametrize("query", ["limit=0", "limit=-1", "limit=x", "marker=nope", "status=bogus",
                                   "changes-since=yesterday", "minRam=lots"])
async def test_bad_list_queries_are_400(rt, client, query):
    r = await client.get(f"/v2.1/images?{query}", headers=member())
    assert r.status_code == 400, r.text
    assert r.json()["badRequest"]["message"]


async def test_delete(rt, client):
    image_id = await _image(rt)
    r = await client.delete(f"/v2.1/images/{image_id}", headers=member())
    assert r.status_code == 204 and not r.content
    assert (await client.get(f"/v2.1/images/{image_id}", headers=member())).status_code == 404
    r = await client.delete(f"/v2.1/images/{image_id}", headers=member())
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == "Image not found."
    for blank in ("/v2.1/images/", "/v2.1/images/-1", "/v2.1/images/" + "a" * 37):
        assert (await client.delete(blank, headers=member())).status_code == 404


async def test_delete_of_a_protected_or_anothers_public_image_is_403(rt, client):
    protected = await _image(rt, protected=True)
    public = await _image(rt, project=OTHER)
    async with rt.db.transaction() as s:  # publicizing is the admin's: set it directly
        (await images.load_row(s, public)).visibility = "public"
    for image_id in (protected, public):
        r = await client.delete(f"/v2.1/images/{image_id}", headers=member())
        assert r.status_code == 403, r.text
        assert r.json()["forbidden"]["message"] == "You are not allowed to delete the image."
        assert (await client.get(f"/v2.1/images/{image_id}", headers=member())).status_code == 200


async def test_a_reader_may_look_but_not_delete(rt, client):
    image_id = await _image(rt)
    reader = {**member(), "X-Roles": "reader"}
    assert (await client.get(f"/v2.1/images/{image_id}", headers=reader)).status_code == 200
    assert (await client.delete(f"/v2.1/images/{image_id}", headers=reader)).status_code == 403


async def test_metadata_life(rt, client):
    image_id = await _image(rt)
    base = f"/v2.1/images/{image_id}/metadata"
    r = await client.put(base, json={"metadata": {"os_version": "1", "os_distro": "d"}}, headers=member())
    assert assert_schema("images.image_metadata", r) == {"metadata": {"os_version": "1", "os_distro": "d"}}
    r = await client.post(base, json={"metadata": {"os_version": "2", "architecture": "x86_64"}},
                          headers=member())
    assert r.json() == {"metadata": {"os_version": "2", "os_distro": "d", "architecture": "x86_64"}}
    r = await client.get(f"{base}/os_distro", headers=member())
    assert assert_schema("images.image_meta_item", r) == {"meta": {"os_distro": "d"}}
    r = await client.put(f"{base}/os_distro", json={"meta": {"os_distro": "e"}}, headers=member())
    assert r.json() == {"meta": {"os_distro": "e"}}
    r = await client.delete(f"{base}/architecture", headers=member())
    assert r.status_code == 204 and not r.content
    assert (await client.get(base, headers=member())).json() == {"metadata": {"os_version": "2",
                                                                              "os_distro": "e"}}
    # The Image service holds them as the image's properties.
    image = await client.get(f"/v2.1/images/{image_id}", headers=member())
    assert image.json()["image"]["metadata"] == {"os_version": "2", "os_distro": "e"}


async def test_metadata_not_found_answers(rt, client):
    image_id = await _image(rt)
    base = f"/v2.1/images/{image_id}/metadata"
    r = await client.get(f"{base}/nope", headers=member())
    assert r.status_code == 404
    r = await client.delete(f"{base}/nope", headers=member())
    assert r.status_code == 404 and r.json()["itemNotFound"]["message"] == "Invalid metadata key"
    missing = str(uuid.uuid4())
    for method, path, body in [("get", "", None), ("post", "", {"metadata": {"a": "b"}}),
                               ("put", "", {"metadata": {"a": "b"}}), ("get", "/a", None),
                               ("put", "/a", {"meta": {"a": "b"}}), ("delete", "/a", None)]:
        r = await client.request(method, f"/v2.1/images/{missing}/metadata{path}", json=body, headers=member())
        assert r.status_code == 404, (method, path, r.text)


async def test_metadata_changes_are_refused_on_anothers_public_image_and_for_readers(rt, client):
    public = await _image(rt, project=OTHER)
    async with rt.db.transaction() as s:
        (await images.load_row(s, public)).visibility = "public"
    r = await client.post(f"/v2.1/images/{public}/metadata", json={"metadata": {"a": "b"}}, headers=member())
    assert r.status_code == 403, r.text
    assert (await client.get(f"/v2.1/images/{public}/metadata", headers=member())).json() == {"metadata": {}}
    own = await _image(rt)
    reader = {**member(), "X-Roles": "reader"}
    r = await client.post(f"/v2.1/images/{own}/metadata", json={"metadata": {"a": "b"}}, headers=reader)
    assert r.status_code == 403, r.text


async def test_metadata_quota_is_the_projects_metadata_items(rt, client):
    image_id = await _image(rt)
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"metadata_items": 2}})
    assert r.status_code == 200, r.text
    base = f"/v2.1/images/{image_id}/metadata"
    assert (await client.put(base, json={"metadata": {"a": "1", "b": "2"}}, headers=member())).status_code == 200
    for r in (await client.post(base, json={"metadata": {"c": "3"}}, headers=member()),
              await client.put(f"{base}/c", json={"meta": {"c": "3"}}, headers=member()),
              await client.put(base, json={"metadata": {"a": "1", "b": "2", "c": "3"}}, headers=member())):
        assert r.status_code == 403, r.text
        assert r.json()["forbidden"]["message"] == "Image metadata limit exceeded"
    assert (await client.get(base, headers=member())).json() == {"metadata": {"a": "1", "b": "2"}}
    # Replacing a value keeps the count.
    assert (await client.put(f"{base}/a", json={"meta": {"a": "9"}}, headers=member())).status_code == 200


@pytest.mark.parametrize("body,path", [
    ({"meta": {"a": "b"}}, "/x"),  # URI and body mismatch
    ({"meta": {"a": "b", "c": "d"}}, "/a"),
    ({"metadata": {"": "b"}}, ""),
    ({"metadata": {"a" * 256: "b"}}, ""),
    ({"metadata": {"a": "b" * 256}}, ""),
    ({"metadata": {"a": 1}}, ""),
    ({"metadata": {"min_ram": "1"}}, ""),  # a core attribute of the image, not a property
])
async def test_bad_metadata_is_400(rt, client, body, path):
    image_id = await _image(rt)
    r = await client.put(f"/v2.1/images/{image_id}/metadata{path}", json=body, headers=member())
    assert r.status_code == 400, r.text
    assert r.json()["badRequest"]["message"]


async def test_a_reserved_property_name_is_403(rt, client):
    image_id = await _image(rt)
    r = await client.post(f"/v2.1/images/{image_id}/metadata", json={"metadata": {"os_glance_x": "1"}},
                          headers=member())
    assert r.status_code == 403, r.text


@pytest.mark.parametrize("mv,images_found,metadata_found", [
    ("2.35", True, True), ("2.36", False, True), ("2.38", False, True), ("2.39", False, False)])
async def test_the_proxy_stops_where_nova_does(rt, client, mv, images_found, metadata_found):
    image_id = await _image(rt)
    headers = version(mv, member())
    for path in ("/v2.1/images", "/v2.1/images/detail", f"/v2.1/images/{image_id}"):
        assert (await client.get(path, headers=headers)).status_code == (200 if images_found else 404)
    r = await client.get(f"/v2.1/images/{image_id}/metadata", headers=headers)
    assert r.status_code == (200 if metadata_found else 404)
    r = await client.delete(f"/v2.1/images/{image_id}", headers=headers)
    assert r.status_code == (204 if images_found else 404)
