"""The Image API v2 over ASGI: round trips, listing, patching, visibility, bad input."""

import hashlib
import uuid

import jsonschema
import pytest

from nefos.control.image.rest import create_app
from image_helpers import (
    ADMIN, OCTET, PATCH, PROJECT_A, PROJECT_B, client_for, make_image, member, upload,
)


async def test_versions(api):
    r = await api.get("/")
    assert r.status_code == 300
    versions = r.json()["versions"]
    current = [v for v in versions if v["status"] == "CURRENT"]
    assert len(current) == 1 and current[0]["id"].startswith("v2.")
    assert current[0]["links"][0]["href"] == "http://image.test/v2/"
    r = await api.get("/versions")
    assert r.status_code == 200 and r.json()["versions"] == versions


async def test_create_upload_download_round_trip(api):
    image = await make_image(api, name="round", min_ram=64, tags=["a", "b", "a"], os_distro="debian")
    assert image["status"] == "queued"
    assert image["visibility"] == "shared"
    assert image["owner"] == PROJECT_A
    assert image["tags"] == ["a", "b"]
    assert image["os_distro"] == "debian"
    assert image["min_ram"] == 64 and image["min_disk"] == 0
    assert image["size"] is None and image["checksum"] is None
    assert image["self"] == f"/v2/images/{image['id']}"
    assert image["file"] == f"/v2/images/{image['id']}/file"
    assert image["schema"] == "/v2/schemas/image"
    assert image["created_at"].endswith("Z")

    r = await api.get(f"/v2/images/{image['id']}/file", headers=member())
    assert r.status_code == 204

    data = b"\x00\x01nefos" * 50000
    r = await upload(api, image["id"], data)
    assert r.status_code == 204, r.text
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["status"] == "active"
    assert shown["size"] == len(data) == shown["virtual_size"]
    assert shown["checksum"] == hashlib.md5(data).hexdigest()
    assert shown["os_hash_algo"] == "sha512"
    assert shown["os_hash_value"] == hashlib.sha512(data).hexdigest()

    r = await api.get(f"/v2/images/{image['id']}/file", headers=member())
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-md5"] == shown["checksum"]
    assert r.content == data

    # A second upload is refused: the image is no longer queued.
    r = await upload(api, image["id"], b"more")
    assert r.status_code == 409
    assert r.json()["code"] == "409 Conflict"

    r = await api.delete(f"/v2/images/{image['id']}", headers=member())
    assert r.status_code == 204
    assert (await api.get(f"/v2/images/{image['id']}", headers=member())).status_code == 404
    assert (await api.get(f"/v2/images/{image['id']}/file", headers=member())).status_code == 404
    assert (await api.delete(f"/v2/images/{image['id']}", headers=member())).status_code == 404


async def test_create_with_id_and_conflict(api):
    image_id = str(uuid.uuid4())
    image = await make_image(api, id=image_id)
    assert image["id"] == image_id
    r = await api.post("/v2/images", json={"id": image_id}, headers=member())
    assert r.status_code == 409
    # Deleted ids are not reused.
    await api.delete(f"/v2/images/{image_id}", headers=member())
    r = await api.post("/v2/images", json={"id": image_id}, headers=member())
    assert r.status_code == 409


async def test_upload_failure_returns_to_queued_and_size_cap(rt):
    async with client_for(create_app(rt, size_cap=1000)) as api:
        image = await make_image(api)
        r = await upload(api, image["id"], b"x" * 1001)
        assert r.status_code == 413
        assert r.json() == {"message": r.json()["message"], "code": "413 Request Entity Too Large",
                            "title": "Request Entity Too Large"}
        shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
        assert shown["status"] == "queued" and shown["size"] is None
        r = await upload(api, image["id"], b"x" * 1000)
        assert r.status_code == 204


async def test_upload_requires_formats(api):
    r = await api.post("/v2/images", json={"name": "noformat"}, headers=member())
    image = r.json()
    r = await upload(api, image["id"], b"data")
    assert r.status_code == 400
    assert "disk_format" in r.json()["message"]


async def test_empty_upload_is_active(api):
    image = await make_image(api)
    assert (await upload(api, image["id"], b"")).status_code == 204
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["status"] == "active" and shown["size"] == 0
    r = await api.get(f"/v2/images/{image['id']}/file", headers=member())
    assert r.status_code == 200 and r.content == b""


async def test_list_filters(api):
    a = await make_image(api, name="alpha", tags=["x", "y"], os_distro="debian", min_disk=1)
    b = await make_image(api, name="beta", tags=["x"], protected=True)
    c = await make_image(api, name="gamma", os_hidden=True)
    await upload(api, a["id"], b"1234")

    async def names(**params):
        r = await api.get("/v2/images", params=params, headers=member())
        assert r.status_code == 200, r.text
        return sorted(i["name"] for i in r.json()["images"])

    assert await names() == ["alpha", "beta"]
    assert await names(name="beta") == ["beta"]
    assert await names(name='in:alpha,"gamma"') == ["alpha"]
    assert await names(status="active") == ["alpha"]
    assert await names(status="queued") == ["beta"]
    assert await names(tag="x") == ["alpha", "beta"]
    assert await names(tag=["x", "y"]) == ["alpha"]
    assert await names(os_hidden="true") == ["gamma"]
    assert await names(protected="true") == ["beta"]
    assert await names(visibility="shared") == ["alpha", "beta"]
    assert await names(visibility="private") == []
    assert await names(owner=PROJECT_A) == ["alpha", "beta"]
    assert await names(owner=PROJECT_B) == []
    assert await names(member_status="all") == ["alpha", "beta"]
    assert await names(os_distro="debian") == ["alpha"]
    assert await names(size_min="4") == ["alpha"]
    assert await names(size_max="3") == []
    assert await names(id=c["id"], os_hidden="true") == ["gamma"]
    assert await names(created_at="gte:2000-01-01T00:00:00Z") == ["alpha", "beta"]
    assert await names(created_at="lt:2000-01-01T00:00:00Z") == []
    r = await api.get("/v2/images", headers=member())
    doc = r.json()
    assert doc["first"] == "/v2/images" and doc["schema"] == "/v2/schemas/images"
    assert "next" not in doc
    assert b["id"]  # used


async def test_pagination_and_sorting(api):
    created = [await make_image(api, name=f"img-{i:02d}", min_ram=i % 3) for i in range(7)]
    # Default order: newest first.
    r = await api.get("/v2/images", headers=member())
    assert [i["id"] for i in r.json()["images"]] == [i["id"] for i in reversed(created)]

    seen, url = [], "/v2/images?limit=3&sort_key=name&sort_dir=asc"
    pages = 0
    while url:
        r = await api.get(url, headers=member())
        assert r.status_code == 200, r.text
        doc = r.json()
        assert len(doc["images"]) <= 3
        seen += [i["name"] for i in doc["images"]]
        url = doc.get("next")
        if url:
            assert url.startswith("/v2/images?") and "sort_key=name" in url and "limit=3" in url
        pages += 1
    assert seen == [f"img-{i:02d}" for i in range(7)]
    assert pages == 3

    r = await api.get("/v2/images", params={"sort": "min_ram:asc,name:desc"}, headers=member())
    got = [(i["min_ram"], i["name"]) for i in r.json()["images"]]
    assert got == sorted(got, key=lambda t: (t[0], [-ord(ch) for ch in t[1]]))

    r = await api.get("/v2/images", params={"sort_key": ["min_ram", "name"], "sort_dir": ["desc", "asc"]},
                      headers=member())
    got = [(i["min_ram"], i["name"]) for i in r.json()["images"]]
    assert got == sorted(got, key=lambda t: (-t[0], t[1]))

    # A marker outside the filtered set still pages by its sort position.
    r = await api.get("/v2/images", params={"sort_key": "name", "sort_dir": "asc",
                                              "marker": created[2]["id"], "min_ram": "0"},
                      headers=member())
    assert r.status_code == 200


async def test_a_members_pages_are_full_however_many_images_of_other_projects_sort_between(api):
    """The project scope is part of the paged query: another project's private images that sort
    between a member's own never shorten the member's pages."""
    mine = []
    for i in range(5):
        await make_image(api, headers=member(PROJECT_B), name=f"img-{i}-b", visibility="private")
        mine.append(await make_image(api, name=f"img-{i}-a", visibility="private"))
    seen, url = [], "/v2/images?limit=2&sort_key=name&sort_dir=asc"
    while url:
        doc = (await api.get(url, headers=member())).json()
        assert len(doc["images"]) == 2 or not doc.get("next")
        seen += [i["name"] for i in doc["images"]]
        url = doc.get("next")
    assert seen == [i["name"] for i in mine]


async def test_filters_on_tags_and_properties_match_the_text_given_literally(api):
    odd = await make_image(api, name="odd", tags=['t"x', "é"], **{'k"$.x': "v'1", "a.b": "é"})
    await make_image(api, name="plain", tags=["tx"], **{"a": "b"})

    async def names(**params):
        r = await api.get("/v2/images", params=params, headers=member())
        assert r.status_code == 200, r.text
        return [i["name"] for i in r.json()["images"]]

    assert await names(tag='t"x') == ["odd"]
    assert await names(tag="é") == ["odd"]
    assert await names(tag="t") == []
    assert await names(**{'k"$.x': "v'1"}) == ["odd"]
    assert await names(**{"a.b": "é"}) == ["odd"]
    assert await names(**{"a": "é"}) == []
    assert odd["id"]


async def test_patch(api):
    image = await make_image(api, name="before", os_distro="debian", tags=["t"])
    url = f"/v2/images/{image['id']}"
    ops = [
        {"op": "replace", "path": "/name", "value": "after"},
        {"op": "add", "path": "/hw_disk_bus", "value": "virtio"},
        {"op": "add", "path": "/os_distro", "value": "ubuntu"},
        {"op": "remove", "path": "/tags"} if False else {"op": "replace", "path": "/tags", "value": ["u", "v"]},
        {"op": "replace", "path": "/min_disk", "value": 2},
        {"op": "add", "path": "/a~1b", "value": "slash"},
        {"op": "replace", "path": "/visibility", "value": "private"},
        {"op": "replace", "path": "/protected", "value": True},
    ]
    r = await api.patch(url, json=ops, headers={**member(), **PATCH})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["name"] == "after" and doc["hw_disk_bus"] == "virtio" and doc["os_distro"] == "ubuntu"
    assert doc["tags"] == ["u", "v"] and doc["min_disk"] == 2 and doc["a/b"] == "slash"
    assert doc["visibility"] == "private" and doc["protected"] is True

    r = await api.patch(url, json=[{"op": "remove", "path": "/os_distro"}], headers={**member(), **PATCH})
    assert r.status_code == 200 and "os_distro" not in r.json()

    # Protected images cannot be deleted until unprotected.
    assert (await api.delete(url, headers=member())).status_code == 403
    r = await api.patch(url, json=[{"op": "replace", "path": "/protected", "value": False}],
                        headers={**member(), **PATCH})
    assert r.status_code == 200
    assert (await api.delete(url, headers=member())).status_code == 204


async def test_patch_in_the_v2_0_format(api):
    """Glance's older patch media type (what Tempest's images client sends): the operation is the
    member's name, and adding a property the image has already is a conflict."""
    image = await make_image(api)
    url = f"/v2/images/{image['id']}"
    v20 = {**member(), "Content-Type": "application/openstack-images-v2.0-json-patch"}
    r = await api.patch(url, json=[{"add": "/hw_rescue_bus", "value": "virtio"},
                                   {"replace": "/name", "value": "renamed"}], headers=v20)
    assert r.status_code == 200, r.text
    assert r.json()["hw_rescue_bus"] == "virtio" and r.json()["name"] == "renamed"
    r = await api.patch(url, json=[{"add": "/hw_rescue_bus", "value": "scsi"}], headers=v20)
    assert r.status_code == 409, r.text
    r = await api.patch(url, json=[{"remove": "/hw_rescue_bus"}], headers=v20)
    assert r.status_code == 200 and "hw_rescue_bus" not in r.json()
    for bad in ([{"add": "/a", "remove": "/b", "value": "x"}], [{"op": "add", "path": "/a", "value": "x"}],
                [{"add": "/a"}], {"add": "/a"}):
        r = await api.patch(url, json=bad, headers=v20)
        assert r.status_code == 400, (bad, r.text)
    r = await api.patch(url, json=[], headers={**member(), "Content-Type": "application/json-patch+json"})
    assert r.status_code == 415


async def test_tags(api):
    image = await make_image(api, tags=["one"])
    url = f"/v2/images/{image['id']}/tags"
    assert (await api.put(f"{url}/two", headers=member())).status_code == 204
    assert (await api.put(f"{url}/two", headers=member())).status_code == 204
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["tags"] == ["one", "two"]
    assert (await api.delete(f"{url}/one", headers=member())).status_code == 204
    assert (await api.delete(f"{url}/one", headers=member())).status_code == 404
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert shown["tags"] == ["two"]
    # Another project may not tag it.
    await api.patch(f"/v2/images/{image['id']}", json=[{"op": "replace", "path": "/visibility",
                                                        "value": "community"}], headers={**member(), **PATCH})
    assert (await api.put(f"{url}/three", headers=member(PROJECT_B))).status_code == 403


async def test_visibility_isolation(api):
    a_private = await make_image(api, name="a-private", visibility="private")
    a_shared = await make_image(api, name="a-shared")
    a_community = await make_image(api, name="a-community", visibility="community")
    public = await make_image(api, headers=ADMIN, name="public", visibility="public")
    b_private = await make_image(api, headers=member(PROJECT_B), name="b-private", visibility="private")

    async def names(headers, **params):
        r = await api.get("/v2/images", params=params, headers=headers)
        assert r.status_code == 200
        return sorted(i["name"] for i in r.json()["images"])

    assert await names(member(PROJECT_A)) == ["a-community", "a-private", "a-shared", "public"]
    assert await names(member(PROJECT_B)) == ["b-private", "public"]
    assert await names(member(PROJECT_B), visibility="community") == ["a-community"]
    assert await names(member(PROJECT_B), visibility="all") == ["a-community", "b-private", "public"]
    assert await names(ADMIN) == ["a-community", "a-private", "a-shared", "b-private", "public"]

    b = member(PROJECT_B)
    for image in (a_private, a_shared):
        assert (await api.get(f"/v2/images/{image['id']}", headers=b)).status_code == 404
        assert (await api.get(f"/v2/images/{image['id']}/file", headers=b)).status_code == 404
        assert (await api.delete(f"/v2/images/{image['id']}", headers=b)).status_code == 404
        r = await api.patch(f"/v2/images/{image['id']}", json=[], headers={**b, **PATCH})
        assert r.status_code == 404
        assert (await upload(api, image["id"], b"x", headers=b)).status_code == 404
    # Visible but not theirs: read yes, change no.
    for image in (a_community, public):
        assert (await api.get(f"/v2/images/{image['id']}", headers=b)).status_code == 200
        assert (await api.delete(f"/v2/images/{image['id']}", headers=b)).status_code == 403
        r = await api.patch(f"/v2/images/{image['id']}",
                            json=[{"op": "replace", "path": "/name", "value": "mine"}], headers={**b, **PATCH})
        assert r.status_code == 403
    assert (await upload(api, a_community["id"], b"x", headers=b)).status_code == 403
    # A marker from another project's private image is no marker.
    r = await api.get("/v2/images", params={"marker": a_private["id"]}, headers=b)
    assert r.status_code == 400
    # Admin can see and change anything.
    assert (await api.get(f"/v2/images/{b_private['id']}", headers=ADMIN)).status_code == 200
    r = await api.patch(f"/v2/images/{b_private['id']}",
                        json=[{"op": "replace", "path": "/name", "value": "renamed"}], headers={**ADMIN, **PATCH})
    assert r.status_code == 200 and r.json()["owner"] == PROJECT_B
    # A reader-only user may look but not create.
    r = await api.post("/v2/images", json={"name": "x"}, headers=member(PROJECT_A, roles="reader"))
    assert r.status_code == 403
    assert (await api.get(f"/v2/images/{a_private['id']}", headers=member(PROJECT_A, roles="reader"))).status_code == 200


async def test_schemas_validate_documents(api):
    image_schema = (await api.get("/v2/schemas/image")).json()
    images_schema = (await api.get("/v2/schemas/images")).json()
    jsonschema.Draft4Validator.check_schema(image_schema)
    jsonschema.Draft4Validator.check_schema(images_schema)
    image = await make_image(api, os_distro="debian", tags=["t"])
    await upload(api, image["id"], b"abc")
    shown = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    jsonschema.validate(shown, image_schema)
    jsonschema.validate((await api.get("/v2/images", headers=member())).json(), images_schema)


async def test_request_id_header(api):
    r = await api.get("/v2/images", headers=member())
    assert r.headers["x-openstack-request-id"].startswith("req-")


# Bad input --------------------------------------------------------------------

MISSING = "00000000-0000-4000-8000-000000000000"
J = {"Content-Type": "application/json"}

BAD_REQUESTS = [
    # (id, method, path, kwargs, expected status, message fragment)
    ("create-not-json", "POST", "/v2/images", {"content": b"{nope", "headers": J}, 400, "JSON"),
    ("create-empty-body", "POST", "/v2/images", {"content": b""}, 400, "empty"),
    ("create-array-body", "POST", "/v2/images", {"json": ["x"]}, 400, "object"),
    ("create-bad-disk-format", "POST", "/v2/images", {"json": {"disk_format": "floppy"}}, 400, "disk_format"),
    ("create-bad-container", "POST", "/v2/images", {"json": {"container_format": "zip"}}, 400, "container_format"),
    ("create-bad-visibility", "POST", "/v2/images", {"json": {"visibility": "everyone"}}, 400, "visibility"),
    ("create-bad-id", "POST", "/v2/images", {"json": {"id": "not-a-uuid"}}, 400, "id"),
    ("create-negative-min-ram", "POST", "/v2/images", {"json": {"min_ram": -1}}, 400, "min_ram"),
    ("create-string-min-disk", "POST", "/v2/images", {"json": {"min_disk": "1"}}, 400, "min_disk"),
    ("create-long-name", "POST", "/v2/images", {"json": {"name": "n" * 256}}, 400, "name"),
    ("create-protected-not-bool", "POST", "/v2/images", {"json": {"protected": "yes"}}, 400, "protected"),
    ("create-non-string-property", "POST", "/v2/images", {"json": {"hw_foo": 1}}, 400, "hw_foo"),
    ("create-null-property", "POST", "/v2/images", {"json": {"hw_foo": None}}, 400, "hw_foo"),
    ("create-tags-not-list", "POST", "/v2/images", {"json": {"tags": "a,b"}}, 400, "tags"),
    ("create-long-tag", "POST", "/v2/images", {"json": {"tags": ["t" * 256]}}, 400, "tag"),
    ("create-read-only-status", "POST", "/v2/images", {"json": {"status": "active"}}, 403, "read-only"),
    ("create-read-only-size", "POST", "/v2/images", {"json": {"size": 3}}, 403, "read-only"),
    ("create-reserved", "POST", "/v2/images", {"json": {"deleted": "1"}}, 403, "reserved"),
    ("create-public-as-member", "POST", "/v2/images", {"json": {"visibility": "public"}}, 403, "publicize"),
    ("create-foreign-owner", "POST", "/v2/images", {"json": {"owner": PROJECT_B}}, 403, "owned"),
    ("create-too-many-tags", "POST", "/v2/images", {"json": {"tags": [f"t{i}" for i in range(129)]}}, 413, "128"),
    ("create-too-many-props", "POST", "/v2/images",
     {"json": {f"p{i}": "v" for i in range(129)}}, 413, "128"),
    ("create-huge-body", "POST", "/v2/images", {"content": b" " * (1024 * 1024 + 1), "headers": J}, 413, "too large"),
    ("show-missing", "GET", f"/v2/images/{MISSING}", {}, 404, MISSING),
    ("show-not-uuid", "GET", "/v2/images/cirros", {}, 404, "cirros"),
    ("delete-missing", "DELETE", f"/v2/images/{MISSING}", {}, 404, MISSING),
    ("upload-missing", "PUT", f"/v2/images/{MISSING}/file", {"content": b"x", "headers": OCTET}, 404, MISSING),
    ("download-missing", "GET", f"/v2/images/{MISSING}/file", {}, 404, MISSING),
    ("patch-missing", "PATCH", f"/v2/images/{MISSING}", {"json": [], "headers": PATCH}, 404, MISSING),
    ("tag-missing-image", "PUT", f"/v2/images/{MISSING}/tags/x", {}, 404, MISSING),
    ("list-bad-limit", "GET", "/v2/images?limit=ten", {}, 400, "limit"),
    ("list-negative-limit", "GET", "/v2/images?limit=-1", {}, 400, "limit"),
    ("list-bad-marker", "GET", f"/v2/images?marker={MISSING}", {}, 400, "marker"),
    ("list-bad-sort-key", "GET", "/v2/images?sort_key=color", {}, 400, "sort key"),
    ("list-bad-sort-dir", "GET", "/v2/images?sort_dir=sideways", {}, 400, "sort direction"),
    ("list-sort-and-sort-key", "GET", "/v2/images?sort=name:asc&sort_key=name", {}, 400, "sort"),
    ("list-bad-visibility", "GET", "/v2/images?visibility=everyone", {}, 400, "visibility"),
    ("list-bad-member-status", "GET", "/v2/images?member_status=maybe", {}, 400, "maybe"),
    ("list-bad-os-hidden", "GET", "/v2/images?os_hidden=perhaps", {}, 400, "os_hidden"),
    ("list-bad-size-min", "GET", "/v2/images?size_min=big", {}, 400, "size_min"),
    ("list-bad-status", "GET", "/v2/images?status=happy", {}, 400, "status"),
    ("list-bad-created-at", "GET", "/v2/images?created_at=gt:yesterday", {}, 400, "timestamp"),
    ("method-not-allowed", "POST", f"/v2/images/{MISSING}", {"json": {}}, 405, "method"),
    ("unknown-path", "GET", "/v2/flavors", {}, 404, "could not be found"),
]

# Requests against an existing queued image (its id replaces {id}).
BAD_REQUESTS_ON_IMAGE = [
    ("patch-wrong-content-type", "PATCH", "/v2/images/{id}", {"json": []}, 415, "Content-Type"),
    ("patch-not-json", "PATCH", "/v2/images/{id}", {"content": b"[", "headers": PATCH}, 400, "JSON"),
    ("patch-not-list", "PATCH", "/v2/images/{id}", {"json": {"op": "add"}, "headers": PATCH}, 400, "array"),
    ("patch-bad-op", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "move", "path": "/name", "value": "x"}], "headers": PATCH}, 400, "operation"),
    ("patch-no-path", "PATCH", "/v2/images/{id}", {"json": [{"op": "add", "value": "x"}], "headers": PATCH},
     400, "path"),
    ("patch-no-value", "PATCH", "/v2/images/{id}", {"json": [{"op": "add", "path": "/x"}], "headers": PATCH},
     400, "value"),
    ("patch-deep-path", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "add", "path": "/name/x", "value": "y"}], "headers": PATCH}, 400, "pointer"),
    ("patch-read-only", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "replace", "path": "/status", "value": "active"}], "headers": PATCH}, 403, "read-only"),
    ("patch-id", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "replace", "path": "/id", "value": MISSING}], "headers": PATCH}, 403, "read-only"),
    ("patch-remove-core", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "remove", "path": "/name"}], "headers": PATCH}, 403, "may not be removed"),
    ("patch-remove-missing-prop", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "remove", "path": "/nothere"}], "headers": PATCH}, 409, "does not exist"),
    ("patch-replace-missing-prop", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "replace", "path": "/nothere", "value": "x"}], "headers": PATCH}, 409, "does not exist"),
    ("patch-bad-value", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "replace", "path": "/min_ram", "value": "lots"}], "headers": PATCH}, 400, "min_ram"),
    ("patch-publicize", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "replace", "path": "/visibility", "value": "public"}], "headers": PATCH}, 403, "publicize"),
    ("patch-locations", "PATCH", "/v2/images/{id}",
     {"json": [{"op": "add", "path": "/locations/-", "value": {"url": "file:///etc/passwd"}}],
      "headers": PATCH}, 403, "locations"),
    ("upload-wrong-content-type", "PUT", "/v2/images/{id}/file",
     {"content": b"x", "headers": {"Content-Type": "text/plain"}}, 415, "Content-Type"),
    ("upload-bad-size-header", "PUT", "/v2/images/{id}/file",
     {"content": b"x", "headers": {**OCTET, "X-OpenStack-Image-Size": "lots"}}, 400, "size"),
    ("upload-declared-too-large", "PUT", "/v2/images/{id}/file",
     {"content": b"x", "headers": {**OCTET, "X-OpenStack-Image-Size": str(2**41)}}, 413, "too large"),
    ("tag-too-long", "PUT", "/v2/images/{id}/tags/" + "t" * 256, {}, 400, "tag"),
    ("untag-missing", "DELETE", "/v2/images/{id}/tags/nothere", {}, 404, "nothere"),
    ("delete-protected", "DELETE", "/v2/images/{id}", {}, 403, "protected"),
]


def _titles():
    import http
    return {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


@pytest.mark.parametrize("case", BAD_REQUESTS + BAD_REQUESTS_ON_IMAGE, ids=lambda c: c[0])
async def test_bad_requests(api, case):
    _, method, path, kwargs, status, fragment = case
    if "{id}" in path:
        image = await make_image(api, protected=True)
        path = path.replace("{id}", image["id"])
    kwargs = dict(kwargs)
    kwargs["headers"] = {**member(), **kwargs.get("headers", {})}
    r = await api.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"message", "code", "title"}
    assert body["code"] == _titles()[status]
    assert body["title"] == body["code"].split(" ", 1)[1]
    assert fragment.lower() in body["message"].lower(), body["message"]
    # Nothing was half-done: a bad request never leaves a new image behind.
    if method == "POST" and path == "/v2/images":
        listing = (await api.get("/v2/images", headers=member())).json()
        assert listing["images"] == []


async def test_an_images_tasks_are_listed_and_unknown_or_invisible_images_are_404(api):
    image = await make_image(api, name="tasks", visibility="private")
    r = await api.get(f"/v2/images/{image['id']}/tasks", headers=member())
    assert r.status_code == 200 and r.json() == {"tasks": []}
    r = await api.get(f"/v2/images/{uuid.uuid4()}/tasks", headers=member())
    assert r.status_code == 404
    r = await api.get(f"/v2/images/{image['id']}/tasks", headers=member(PROJECT_B))
    assert r.status_code == 404
