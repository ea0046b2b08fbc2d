"""os-server-password (the metadata service's POST, GET and DELETE through the API) and
OS-DCF:diskConfig on create, update, rebuild and resize."""

from __future__ import annotations

from nefos.model import server_password
from nefos.objects import guest_passwords
from tests.clouds import ADMIN, member


async def _server(cloud, **extra):
    net = await cloud.make_network(shared=True)
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member(), **extra))["server"]["id"]
    return sid, await cloud.wait_status(sid, "ACTIVE", headers=member())


async def test_password_stored_read_and_cleared(cloud):
    sid, _ = await _server(cloud)
    base = f"/v2.1/servers/{sid}/os-server-password"
    r = await cloud.compute.get(base, headers=member())
    assert r.status_code == 200 and r.json() == {"password": ""}, r.text
    secret = "x" * 300 + "end"  # spans two of Nova's 255-character keys
    await guest_passwords.store_server_password(cloud.rt.db, sid, secret, only_if_unset=True)
    assert (await cloud.compute.get(base, headers=member())).json() == {"password": secret}
    assert (await cloud.compute.get(base, headers=member(project="o" * 32))).status_code == 404
    reader = {**member(), "X-Roles": "reader"}
    assert (await cloud.compute.get(base, headers=reader)).status_code == 200
    assert (await cloud.compute.delete(base, headers=reader)).status_code == 403
    assert (await cloud.compute.delete(base, headers=member())).status_code == 204
    assert (await cloud.compute.get(base, headers=member())).json() == {"password": ""}
    # the other system metadata stays
    server = await cloud.server(sid)
    assert server["status"] == "ACTIVE"


async def test_metadata_service_takes_the_password_once(cloud):
    """The guest's POST to openstack/<version>/password (signed as its proxy signs): stored once,
    409 after, 400 past Nova's 1020 bytes; the owner reads it through the API."""
    import httpx

    from nefos.control.metadata import app as md_app
    from nefos.clients import metadata as identification
    sid, server = await _server(cloud)
    app = md_app.create_app(cloud.rt)
    headers = {"X-Instance-ID": sid, "X-Tenant-ID": server["tenant_id"],
               "X-Instance-ID-Signature": identification.sign(app.state.secret, sid)}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://169.254.169.254",
                                 headers=headers) as md:
        r = await md.post("/openstack/latest/password", content=b"y" * (server_password.MAX_SIZE + 1))
        assert r.status_code == 400, r.text
        assert (await md.post("/openstack/2013-04-04/password", content=b"s3cret")).status_code == 200
        assert (await md.get("/openstack/latest/password")).text == "s3cret"
        assert (await md.post("/openstack/latest/password", content=b"again")).status_code == 409
        base = f"/v2.1/servers/{sid}/os-server-password"
        assert (await cloud.compute.get(base, headers=member())).json() == {"password": "s3cret"}
        assert (await cloud.compute.delete(base, headers=member())).status_code == 204
        assert (await md.post("/openstack/latest/password", content=b"new")).status_code == 200
        assert (await cloud.compute.get(base, headers=member())).json() == {"password": "new"}


async def test_disk_config_on_create_update_rebuild_resize(cloud):
    sid, server = await _server(cloud, **{"OS-DCF:diskConfig": "AUTO"})
    assert server["OS-DCF:diskConfig"] == "AUTO"
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"OS-DCF:diskConfig": "MANUAL"}},
                                headers=member())
    assert r.status_code == 200 and r.json()["server"]["OS-DCF:diskConfig"] == "MANUAL", r.text
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"OS-DCF:diskConfig": "auto"}},
                                headers=member())
    assert r.status_code == 400, r.text
    image = await cloud.default_image()
    r = await cloud.action(sid, {"rebuild": {"imageRef": image, "OS-DCF:diskConfig": "AUTO"}}, headers=member())
    assert r.json()["server"]["OS-DCF:diskConfig"] == "AUTO"
    await cloud.wait_status(sid, "ACTIVE", headers=member())
    r = await cloud.action(sid, {"rebuild": {"imageRef": image}}, headers=member())
    assert r.json()["server"]["OS-DCF:diskConfig"] == "MANUAL"  # the image's (none: MANUAL), as Nova
    await cloud.wait_status(sid, "ACTIVE", headers=member())
    await cloud.action(sid, {"resize": {"flavorRef": "2", "OS-DCF:diskConfig": "AUTO"}}, headers=member())
    server = await cloud.wait_status(sid, "VERIFY_RESIZE", headers=member())
    assert server["OS-DCF:diskConfig"] == "AUTO"
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json={"resize": {
        "flavorRef": "1", "OS-DCF:diskConfig": "BAD"}}, headers=member())
    assert r.status_code == 400
    net = await cloud.make_network(name="other", cidr="10.1.0.0/24")
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "x", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}],
        "OS-DCF:diskConfig": "SOMETIMES"}})
    assert r.status_code == 400 and "badRequest" in r.json(), r.text


def test_disk_config_rules():
    import pytest

    from nefos import exceptions
    from nefos.control.compute import disk_config
    assert disk_config.for_image({"properties": {}}, None) is False
    assert disk_config.for_image({"properties": {"auto_disk_config": "True"}}, None) is True
    assert disk_config.for_image({"properties": {"auto_disk_config": "True"}}, False) is False
    assert disk_config.for_image({"properties": {"auto_disk_config": "disabled"}}, False) is False
    with pytest.raises(exceptions.Invalid, match="has automatic disk resize disabled"):
        disk_config.for_image({"id": "i", "properties": {"auto_disk_config": " Disabled"}}, True)
    assert disk_config.for_resize({"system_metadata": {}}, None) is False
    with pytest.raises(exceptions.Invalid):
        disk_config.for_resize({"system_metadata": {"image_auto_disk_config": "disabled"}}, True)
