"""Microversions past 2.89, each response checked against Tempest's schema for its version (or Nova's
own where Tempest has none): a hostname on create, update and rebuild, shown to every user (2.90),
key pairs imported only, with ``@`` and ``.`` in names (2.92), FQDN hostnames (2.94), the pinned
availability zone (2.96), the image's properties (2.98) and the scheduler hints (2.100)."""

from __future__ import annotations

import copy

from nefos.control.compute.rest import microversion
from nefos.http_client import verified_tls
from tests.api.conftest import member as api_member, version
from tests.api.test_keypairs import _md5_fingerprint, _ssh_public_key
from tests.api.test_microversions_past_275 import cloud  # noqa: F401  (the fixture: two fake hosts, a network)
from tests.api.test_microversions_servers import _boot, _h, _show
from tests.clouds import member
from tests.schemas import assert_schema, resolve


async def _active(cloud, mv: str, headers=None, **server) -> str:
    sid = (await _boot(cloud, mv, headers=headers, **server))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", headers=headers)
    return sid


async def _image(cloud, **properties) -> str:
    from nefos.context import admin_context
    from nefos.control.image import images
    row = await images.create(cloud.rt, admin_context(), {"name": "props", "disk_format": "raw",
                                                          "container_format": "bare", "visibility": "public",
                                                          **properties})

    async def data():
        yield b"an image with properties"
    await images.upload(cloud.rt, admin_context(), row.id, data())
    return row.id


async def _rebuild(cloud, sid: str, mv: str, headers=None, **args) -> dict:
    args.setdefault("imageRef", await cloud.default_image())
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"rebuild": args},
                                 headers=headers or _h(mv))
    body = assert_schema("servers.rebuild_server_with_admin_pass", r)["server"]
    await cloud.wait_status(sid, "ACTIVE", headers=headers)
    return body


async def _update(cloud, sid: str, mv: str, headers=None, **server) -> dict:
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": server}, headers=headers or _h(mv))
    return assert_schema("servers.update_server", r)["server"]


async def _detail(cloud, sid: str, mv: str, headers=None) -> dict:
    r = await cloud.compute.get("/v2.1/servers/detail", headers=headers or _h(mv))
    return next(s for s in assert_schema("servers.list_servers_detail", r)["servers"] if s["id"] == sid)


def test_max_version():
    assert not microversion.MAX < microversion.APIVersion.parse("2.100")  # the max itself: test_microversions_past_2100


# 2.90 / 2.94 ---------------------------------------------------------------------------------------

async def test_hostname_on_create_update_rebuild(cloud):
    owner = member()
    image = await cloud.default_image()
    base = {"name": "h", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": cloud.net["id"]}]}
    r = await cloud.compute.post("/v2.1/servers", json={"server": dict(base, hostname="web-1")},
                                 headers=_h("2.89", owner))
    assert r.status_code == 400  # not before 2.90
    for bad in ("a", "-web", "web-", "web.example.com", "web_1", "x" * 64):
        r = await cloud.compute.post("/v2.1/servers", json={"server": dict(base, hostname=bad)},
                                     headers=_h("2.90", owner))
        assert r.status_code == 400, (bad, r.text)
    r = await cloud.compute.post("/v2.1/servers", json={"server": dict(base, hostname="web-1", max_count=2)},
                                 headers=_h("2.90", owner))
    assert r.status_code == 400 and "single hostname to multiple instances" in r.text
    sid = await _active(cloud, "2.90", headers=_h("2.90", owner), name="My Web Server", hostname="Web-1")

    shown = await _show(cloud, sid, "2.90", headers=_h("2.90", owner))
    # Nova's show_response_v290 requires the attribute: a member sees it from 2.90, not before.
    assert shown["OS-EXT-SRV-ATTR:hostname"] == "Web-1"
    assert "OS-EXT-SRV-ATTR:hostname" not in await _show(cloud, sid, "2.89", headers=_h("2.89", owner))
    assert "OS-EXT-SRV-ATTR:host" not in shown  # the other extended attributes stay admin-only
    assert (await _detail(cloud, sid, "2.90", _h("2.90", owner)))["OS-EXT-SRV-ATTR:hostname"] == "Web-1"
    assert (await _show(cloud, sid, "2.90"))["OS-EXT-SRV-ATTR:hostname"] == "Web-1"  # admin: as before
    # The list filter a non-admin may use from 2.90.
    r = await cloud.compute.get("/v2.1/servers", params={"hostname": "^Web-1$"}, headers=_h("2.90", owner))
    assert [s["id"] for s in assert_schema("servers.list_servers", r)["servers"]] == [sid]
    r = await cloud.compute.get("/v2.1/servers", params={"hostname": "^nomatch$"}, headers=_h("2.89", owner))
    assert [s["id"] for s in r.json()["servers"]] == [sid]  # dropped before 2.90

    # A rename keeps the hostname (as Nova); the hostname changes only when asked.
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"hostname": "web-2"}},
                                headers=_h("2.89", owner))
    assert r.status_code == 400
    updated = await _update(cloud, sid, "2.90", _h("2.90", owner), name="renamed")
    assert (updated["name"], updated["OS-EXT-SRV-ATTR:hostname"]) == ("renamed", "Web-1")
    updated = await _update(cloud, sid, "2.90", _h("2.90", owner), hostname="web-2")
    assert updated["OS-EXT-SRV-ATTR:hostname"] == "web-2"
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"hostname": "web.example.com"}},
                                headers=_h("2.93", owner))
    assert r.status_code == 400  # an FQDN only from 2.94

    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action",
                                 json={"rebuild": {"imageRef": image, "hostname": "web-3"}}, headers=_h("2.89", owner))
    assert r.status_code == 400
    rebuilt = await _rebuild(cloud, sid, "2.90", _h("2.90", owner), hostname="web-3")
    assert rebuilt["OS-EXT-SRV-ATTR:hostname"] == "web-3"
    assert (await _show(cloud, sid, "2.90", headers=_h("2.90", owner)))["OS-EXT-SRV-ATTR:hostname"] == "web-3"

    # Without a hostname: derived from the name, as before.
    other = await _active(cloud, "2.90", headers=_h("2.90", owner), name="plain")
    assert (await _show(cloud, other, "2.90", headers=_h("2.90", owner)))["OS-EXT-SRV-ATTR:hostname"] == "plain"


async def test_fqdn_hostname(cloud):
    fqdn = "x" * 52 + "-guest-test.domaintest.com"  # Tempest's ServersV294TestFqdnHostnames
    image = await cloud.default_image()
    base = {"name": "guest-instance-1", "imageRef": image, "flavorRef": "1",
            "networks": [{"uuid": cloud.net["id"]}]}
    r = await cloud.compute.post("/v2.1/servers", json={"server": dict(base, hostname=fqdn)}, headers=_h("2.93"))
    assert r.status_code == 400
    for bad in ("", "x" * 256, "web server", "web/1"):
        r = await cloud.compute.post("/v2.1/servers", json={"server": dict(base, hostname=bad)}, headers=_h("2.94"))
        assert r.status_code == 400, (bad, r.text)
    sid = await _active(cloud, "2.94", hostname=fqdn)
    assert (await _show(cloud, sid, "2.94"))["OS-EXT-SRV-ATTR:hostname"] == fqdn
    assert (await _update(cloud, sid, "2.94", hostname="a.b_c.d"))["OS-EXT-SRV-ATTR:hostname"] == "a.b_c.d"
    assert (await _rebuild(cloud, sid, "2.94", hostname="e.f"))["OS-EXT-SRV-ATTR:hostname"] == "e.f"


# 2.92 ----------------------------------------------------------------------------------------------

async def test_keypairs_import_only_with_at_and_dot(client):
    owner = api_member()
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "gen"}}, headers=version("2.92", owner))
    assert r.status_code == 400  # no generation from 2.92
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "gen"}}, headers=version("2.91", owner))
    assert "private_key" in assert_schema("keypairs.create_keypair", r)["keypair"]  # still generated
    key = _ssh_public_key()
    name = "me@example.com"
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": name, "public_key": key}},
                          headers=version("2.91", owner))
    assert r.status_code == 400  # '@' and '.' only from 2.92
    for bad in ("a/b", "a:b", " lead", "trail ", "ü"):
        r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": bad, "public_key": key}},
                              headers=version("2.92", owner))
        assert r.status_code == 400, bad
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": name, "public_key": key, "type": "ssh"}},
                          headers=version("2.92", owner))
    kp = assert_schema("keypairs.create_keypair", r)["keypair"]
    assert r.status_code == 201 and "private_key" not in kp
    assert (kp["name"], kp["public_key"], kp["fingerprint"], kp["type"]) == (name, key, _md5_fingerprint(key), "ssh")
    r = await client.get(f"/v2.1/os-keypairs/{name}", headers=version("2.92", owner))
    assert assert_schema("keypairs.get_keypair", r)["keypair"]["name"] == name
    r = await client.get("/v2.1/os-keypairs", headers=version("2.92", owner))
    assert name in {k["keypair"]["name"] for k in assert_schema("keypairs.list_keypairs", r)["keypairs"]}
    r = await client.delete(f"/v2.1/os-keypairs/{name}", headers=version("2.92", owner))
    assert_schema("keypairs.delete_keypair", r)
    assert (await client.get(f"/v2.1/os-keypairs/{name}", headers=version("2.92", owner))).status_code == 404


# 2.96 (and 2.91, whose test in test_microversions_past_275 runs from 2.96) ----------------------------

async def test_pinned_availability_zone(cloud):
    pinned = await _active(cloud, "2.96", availability_zone="nova")
    unpinned = await _active(cloud, "2.96")
    assert "pinned_availability_zone" not in await _show(cloud, pinned, "2.95")
    for sid, zone in ((pinned, "nova"), (unpinned, None)):
        shown = await _show(cloud, sid, "2.96")
        assert (shown["pinned_availability_zone"], shown["OS-EXT-AZ:availability_zone"]) == (zone, "nova")
        assert (await _detail(cloud, sid, "2.96"))["pinned_availability_zone"] == zone
        assert (await _update(cloud, sid, "2.96"))["pinned_availability_zone"] == zone
        assert (await _rebuild(cloud, sid, "2.96"))["pinned_availability_zone"] == zone
    owner = member()
    mine = await _active(cloud, "2.96", headers=_h("2.96", owner), availability_zone="nova")
    assert (await _show(cloud, mine, "2.96", headers=_h("2.96", owner)))["pinned_availability_zone"] == "nova"
    r = await cloud.compute.get("/v2.1/servers", headers=_h("2.96"))
    assert "pinned_availability_zone" not in assert_schema("servers.list_servers", r)["servers"][0]


# 2.98 ----------------------------------------------------------------------------------------------

async def test_image_properties(cloud):
    first = await _image(cloud, hw_disk_bus="virtio", os_distro="debian", hw_qemu_guest_agent="yes",
                         architecture="x86_64", my_custom_property="not shown")
    second = await _image(cloud, os_distro="alpine", hw_video_model="vga")
    sid = await _active(cloud, "2.98", imageRef=first)
    expected = {"hw_disk_bus": "virtio", "os_distro": "debian", "hw_qemu_guest_agent": "yes",
                "architecture": "x86_64"}  # what Nova knows of them (a legacy name too), not custom ones
    assert "properties" not in (await _show(cloud, sid, "2.97"))["image"]
    assert (await _show(cloud, sid, "2.98"))["image"]["properties"] == expected
    assert (await _detail(cloud, sid, "2.98"))["image"]["properties"] == expected
    assert (await _update(cloud, sid, "2.98"))["image"]["properties"] == expected
    # Rebuild: the new image's properties replace the old one's (test_image_properties_in_system_metadata:
    # the rest of the system metadata stays).
    rebuilt = await _rebuild(cloud, sid, "2.98", imageRef=second)
    assert rebuilt["image"]["properties"] == {"os_distro": "alpine", "hw_video_model": "vga"}
    assert (await _show(cloud, sid, "2.98"))["image"]["properties"] == {"os_distro": "alpine",
                                                                         "hw_video_model": "vga"}
    plain = await _active(cloud, "2.98")
    assert (await _show(cloud, plain, "2.98"))["image"]["properties"] == {}


def test_image_properties_in_system_metadata():
    from nefos.control.compute import image_properties
    image = {"properties": {"os_distro": "x", "hw_cpu_cores": 2, "img_mappings": "[...]", "long": "é" * 200,
                            "os_require_quiesce": True},
             "min_ram": 0, "min_disk": 1, "disk_format": "raw", "container_format": "bare"}
    meta = image_properties.from_image(image, {"root_gb": 5})
    assert meta["image_os_distro"] == "x" and meta["image_hw_cpu_cores"] == "2"
    assert meta["image_os_require_quiesce"] == "True" and "image_img_mappings" not in meta
    assert len(meta["image_long"].encode()) <= 255 and meta["image_min_disk"] == 5
    assert meta["image_disk_format"] == "raw" and meta["image_min_ram"] == 0
    kept = image_properties.replaced({"shelved_image_id": "s", **meta}, {"properties": {"os_type": "linux"}})
    assert kept == {"shelved_image_id": "s", "image_os_type": "linux"}
    assert image_properties.shown(meta) == {"os_distro": "x", "hw_cpu_cores": "2", "os_require_quiesce": "True"}


# 2.100 ---------------------------------------------------------------------------------------------

def _v2100_as_nova_shows(name: str) -> dict:
    """Tempest's 2.100 schema, with ``group`` as Nova's own hints schema has it (a list of one uuid too)
    and ``cidr`` a list too: Nova shows every hint as its request spec keeps it, in a list, which
    Tempest's schema (the create request's) does not allow for those two."""
    schema = copy.deepcopy(resolve(name, "2.100"))
    body = schema["response_body"]["properties"]
    server = body["servers"]["items"] if "servers" in body else body["server"]
    hints = server["properties"]["scheduler_hints"]["properties"]
    hints["group"] = {"oneOf": [{"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": 1},
                                {"type": "string", "format": "uuid"}]}
    hints["cidr"] = {"type": "array", "items": hints["cidr"]}
    return schema


async def test_scheduler_hints(cloud):
    first = await _active(cloud, "2.100")
    assert "scheduler_hints" not in await _show(cloud, first, "2.99")
    assert (await _show(cloud, first, "2.100"))["scheduler_hints"] == {}
    hints = {"different_host": first, "my_hint": "x"}
    r = await cloud.compute.post("/v2.1/servers", json={
        "server": {"name": "hinted", "imageRef": await cloud.default_image(), "flavorRef": "1",
                   "networks": [{"uuid": cloud.net["id"]}]}, "os:scheduler_hints": hints}, headers=_h("2.100"))
    assert r.status_code == 202, r.text
    sid = r.json()["server"]["id"]
    shown = await cloud.wait_status(sid, "ACTIVE")
    assert shown["OS-EXT-SRV-ATTR:host"] != (await _show(cloud, first, "2.100"))["OS-EXT-SRV-ATTR:host"]
    # As Nova's request spec keeps them: every value a list.
    expected = {"different_host": [first], "my_hint": ["x"]}
    assert (await _show(cloud, sid, "2.100"))["scheduler_hints"] == expected
    assert (await _detail(cloud, sid, "2.100"))["scheduler_hints"] == expected
    assert (await _update(cloud, sid, "2.100"))["scheduler_hints"] == expected
    assert (await _rebuild(cloud, sid, "2.100"))["scheduler_hints"] == expected
    owner = member()
    mine = await _active(cloud, "2.100", headers=_h("2.100", owner))
    assert (await _show(cloud, mine, "2.100", headers=_h("2.100", owner)))["scheduler_hints"] == {}
    # A server group hint: ["<uuid>"], as Nova shows it (Nova's schema; Tempest's wants a bare uuid).
    r = await cloud.compute.post("/v2.1/os-server-groups", json={"server_group": {"name": "g", "policy": "affinity"}},
                                 headers=_h("2.64"))
    group = r.json()["server_group"]["id"]
    r = await cloud.compute.post("/v2.1/servers", json={
        "server": {"name": "grouped", "imageRef": await cloud.default_image(), "flavorRef": "1",
                   "networks": [{"uuid": cloud.net["id"]}]}, "os:scheduler_hints": {"group": group, "cidr": "/24"}},
        headers=_h("2.99"))
    assert r.status_code == 202, r.text
    grouped = r.json()["server"]["id"]
    await cloud.wait_status(grouped, "ACTIVE")
    import httpx
    async with httpx.AsyncClient(verify=verified_tls(),
                                 base_url=str(cloud.compute.base_url), timeout=30) as raw:  # no Tempest hook
        r = await raw.get(f"/v2.1/servers/{grouped}", headers=_h("2.100"))
    assert assert_schema(_v2100_as_nova_shows("servers.get_server"), r)["server"]["scheduler_hints"] == {
        "group": [group], "cidr": ["/24"]}
