"""The Image API's PATCH keeps Glance's answers: each operation is checked as Glance checks it (read-only
and reserved attributes 403, core attributes never removed, a format changed only while queued,
properties that are strings), a replace or remove of a property the image lacks is 409, and a
patch that fails anywhere changes nothing."""

from image_helpers import ADMIN, PATCH, PROJECT_B, make_image, member, upload


async def patch(api, image, ops, headers=None):
    return await api.patch(f"/v2/images/{image['id']}", json=ops, headers={**(headers or member()), **PATCH})


async def test_read_only_and_reserved_attributes_are_refused(api):
    image = await make_image(api)
    for attr in ("status", "checksum", "size", "created_at", "id", "self", "file", "schema"):
        r = await patch(api, image, [{"op": "replace", "path": f"/{attr}", "value": "x"}])
        assert r.status_code == 403 and f"Attribute '{attr}' is read-only." in r.text, (attr, r.text)
    for attr in ("location", "deleted", "properties", "os_glance_import_task"):
        r = await patch(api, image, [{"op": "add", "path": f"/{attr}", "value": "x"}])
        assert r.status_code == 403 and f"Attribute '{attr}' is reserved." in r.text, (attr, r.text)
    r = await patch(api, image, [{"op": "add", "path": "/locations/-", "value": {"url": "http://x"}}])
    assert r.status_code == 403 and "locations" in r.text


async def test_core_attributes_are_never_removed(api):
    image = await make_image(api, name="kept")
    for attr in ("name", "tags", "min_ram", "visibility"):
        r = await patch(api, image, [{"op": "remove", "path": f"/{attr}"}])
        assert r.status_code == 403 and f"Property {attr} may not be removed." in r.text, (attr, r.text)


async def test_a_property_the_image_lacks_cannot_be_replaced_or_removed(api):
    image = await make_image(api)
    for op in ({"op": "replace", "path": "/nope", "value": "x"}, {"op": "remove", "path": "/nope"}):
        r = await patch(api, image, [op])
        assert r.status_code == 409 and "Property nope does not exist." in r.text, (op, r.text)
    # The conflict is answered before the value is looked at, as Glance does.
    r = await patch(api, image, [{"op": "replace", "path": "/nope", "value": 5}])
    assert r.status_code == 409, r.text


async def test_an_add_makes_or_replaces_a_property_and_a_later_operation_sees_it(api):
    image = await make_image(api, os_distro="debian")
    r = await patch(api, image, [{"op": "add", "path": "/os_distro", "value": "ubuntu"},
                                 {"op": "add", "path": "/hw_qemu_guest_agent", "value": "yes"},
                                 {"op": "replace", "path": "/hw_qemu_guest_agent", "value": "no"},
                                 {"op": "add", "path": "/gone", "value": "soon"},
                                 {"op": "remove", "path": "/gone"}])
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["os_distro"] == "ubuntu" and doc["hw_qemu_guest_agent"] == "no" and "gone" not in doc


async def test_values_must_fit_the_schema(api):
    image = await make_image(api)
    for op in ({"op": "add", "path": "/os_distro", "value": 5},
               {"op": "replace", "path": "/min_ram", "value": "lots"},
               {"op": "replace", "path": "/visibility", "value": "everyone"},
               {"op": "add", "path": "/os_distro", "value": "x" * 65536},
               {"op": "replace", "path": "/name"}):
        r = await patch(api, image, [op])
        assert r.status_code == 400, (op, r.text)


async def test_malformed_operations_are_bad_requests(api):
    image = await make_image(api)
    for ops in ({"op": "add", "path": "/a", "value": "x"}, ["add"],
                [{"op": "move", "from": "/a", "path": "/b"}], [{"op": "add", "value": "x"}],
                [{"op": "add", "path": "a", "value": "x"}], [{"op": "add", "path": "/a/b", "value": "x"}],
                [{"op": "add", "path": "/", "value": "x"}]):
        r = await patch(api, image, ops)
        assert r.status_code == 400, (ops, r.text)


async def test_a_failing_patch_changes_nothing(api):
    image = await make_image(api, name="before", os_distro="debian")
    r = await patch(api, image, [{"op": "replace", "path": "/name", "value": "after"},
                                 {"op": "remove", "path": "/os_distro"},
                                 {"op": "remove", "path": "/missing"}])
    assert r.status_code == 409, r.text
    doc = (await api.get(f"/v2/images/{image['id']}", headers=member())).json()
    assert doc["name"] == "before" and doc["os_distro"] == "debian"


async def test_formats_change_only_while_queued(api):
    image = await make_image(api, disk_format="raw", container_format="bare")
    r = await patch(api, image, [{"op": "replace", "path": "/disk_format", "value": "qcow2"}])
    assert r.status_code == 200 and r.json()["disk_format"] == "qcow2", r.text
    r = await patch(api, image, [{"op": "replace", "path": "/disk_format", "value": "raw"}])
    assert r.status_code == 200, r.text
    assert (await upload(api, image["id"], b"\0" * 512)).status_code == 204
    r = await patch(api, image, [{"op": "replace", "path": "/disk_format", "value": "qcow2"}])
    assert r.status_code == 403 and "can be only replaced for a queued image" in r.text
    r = await patch(api, image, [{"op": "replace", "path": "/disk_format", "value": "raw"}])
    assert r.status_code == 200, r.text  # the same value is no change


async def test_public_and_another_owner_are_the_admins(api):
    image = await make_image(api)
    r = await patch(api, image, [{"op": "replace", "path": "/visibility", "value": "public"}])
    assert r.status_code == 403 and "publicize_image" in r.text
    r = await patch(api, image, [{"op": "replace", "path": "/owner", "value": PROJECT_B}])
    assert r.status_code == 403 and "change the owner" in r.text
    r = await patch(api, image, [{"op": "replace", "path": "/visibility", "value": "public"},
                                 {"op": "replace", "path": "/owner", "value": PROJECT_B}], headers=ADMIN)
    assert r.status_code == 200 and r.json()["visibility"] == "public" and r.json()["owner"] == PROJECT_B
