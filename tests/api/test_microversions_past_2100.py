"""Microversions past 2.100, as Nova: flavors without ``rxtx_factor`` and ``OS-FLV-DISABLED:disabled``,
a flavor ``name`` filter and unknown query parameters refused (2.102), and the pinned availability
zone set by ``PUT /servers/{id}`` (2.104). 2.101 (volume attachments) and 2.103 (``/os-volumes_boot``
removed) change APIs Nefos does not have."""

from __future__ import annotations

from nefos.control.compute.rest import microversion
from tests.api.test_microversions_past_275 import cloud  # noqa: F401  (the fixture: two fake hosts, a network)
from tests.api.test_microversions_past_289 import _active, _update
from tests.api.test_microversions_servers import _h, _show
from tests.clouds import member
from tests.schemas import assert_schema


def test_max_version():
    assert microversion.MAX_VERSION == "2.104"
    assert microversion.APIVersion.parse("2.104") > microversion.APIVersion.parse("2.100")


async def test_latest_is_2_104(cloud):
    r = await cloud.compute.get("/v2.1/servers", headers={"OpenStack-API-Version": "compute latest"})
    assert r.headers["openstack-api-version"] == "compute 2.104"
    r = await cloud.compute.get("/v2.1", headers={"OpenStack-API-Version": "compute 2.104"})
    assert r.json()["version"]["version"] == "2.104"
    r = await cloud.compute.get("/v2.1/servers", headers={"OpenStack-API-Version": "compute 2.105"})
    assert r.status_code == 406


# 2.101 / 2.103 -------------------------------------------------------------------------------------

async def test_volume_apis_as_without_block_storage(cloud):
    """2.103 removes the servers collection's old name; no volume is ever attached (404 for a server
    that is not there, at every version)."""
    for mv, status in (("2.100", 200), ("2.101", 200), ("2.102", 200), ("2.103", 404), ("2.104", 404)):
        assert (await cloud.compute.get("/v2.1/os-volumes_boot", headers=_h(mv))).status_code == status, mv
        assert (await cloud.compute.get("/v2.1/servers/x/os-volume_attachments", headers=_h(mv))).status_code == 404


# 2.102 ---------------------------------------------------------------------------------------------

async def _flavor(cloud, mv: str, **extra) -> dict:
    body = {"name": extra.pop("name", "f-2102"), "ram": 64, "vcpus": 1, "disk": 1, **extra}
    return await cloud.compute.post("/v2.1/flavors", json={"flavor": body}, headers=_h(mv))


async def test_flavor_views_drop_rxtx_factor_and_disabled(cloud):
    r = await _flavor(cloud, "2.102")
    created = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert "rxtx_factor" not in created and "OS-FLV-DISABLED:disabled" not in created
    fid = created["id"]
    for mv, present in (("2.101", True), ("2.102", False), ("2.104", False)):
        shown = (await cloud.compute.get(f"/v2.1/flavors/{fid}", headers=_h(mv))).json()["flavor"]
        assert ("rxtx_factor" in shown) is present and ("OS-FLV-DISABLED:disabled" in shown) is present
        listed = (await cloud.compute.get("/v2.1/flavors/detail", headers=_h(mv))).json()["flavors"]
        assert all(("rxtx_factor" in f) is present for f in listed)


async def test_rxtx_factor_refused_from_2_102(cloud):
    assert (await _flavor(cloud, "2.101", name="old", rxtx_factor=2.0)).status_code == 200
    r = await _flavor(cloud, "2.102", name="new", rxtx_factor=2.0)
    assert r.status_code == 400 and "rxtx_factor" in r.json()["badRequest"]["message"]
    ok = await cloud.compute.get("/v2.1/flavors?sort_key=rxtx_factor", headers=_h("2.101"))
    assert ok.status_code == 200
    bad = await cloud.compute.get("/v2.1/flavors?sort_key=rxtx_factor", headers=_h("2.102"))
    assert bad.status_code == 400


async def test_flavor_name_filter(cloud):
    for name in ("alpha-small", "alpha-large", "beta"):
        assert (await _flavor(cloud, "2.102", name=name)).status_code == 200
    r = await cloud.compute.get("/v2.1/flavors", params={"name": "^alpha"}, headers=_h("2.102"))
    assert sorted(f["name"] for f in r.json()["flavors"]) == ["alpha-large", "alpha-small"]
    r = await cloud.compute.get("/v2.1/flavors/detail", params={"name": "a-large$"}, headers=_h("2.102"))
    assert [f["name"] for f in r.json()["flavors"]] == ["alpha-large"]
    # before 2.102 the filter is unknown (refused since 2.75)
    assert (await cloud.compute.get("/v2.1/flavors?name=beta", headers=_h("2.101"))).status_code == 400
    r = await cloud.compute.get("/v2.1/flavors", params={"name": "("}, headers=_h("2.102"))
    assert r.status_code == 400 and "badRequest" in r.json()


async def test_unknown_query_parameters_refused_from_2_102(cloud):
    sid = await _active(cloud, "2.102")
    paths = ["/v2.1/os-availability-zone", "/v2.1/os-availability-zone/detail", "/v2.1/flavors/1",
             "/v2.1/flavors/1/os-extra_specs", f"/v2.1/servers/{sid}", f"/v2.1/servers/{sid}/ips",
             f"/v2.1/servers/{sid}/metadata", f"/v2.1/servers/{sid}/os-interface", f"/v2.1/servers/{sid}/topology",
             "/v2.1/os-quota-class-sets/default", "/v2.1/os-aggregates"]
    for path in paths:
        assert (await cloud.compute.get(path + "?bogus=1", headers=_h("2.101"))).status_code == 200, path
        r = await cloud.compute.get(path + "?bogus=1", headers=_h("2.102"))
        assert r.status_code == 400, path
        assert "Additional properties are not allowed" in r.json()["badRequest"]["message"]
        assert (await cloud.compute.get(path, headers=_h("2.102"))).status_code == 200, path


# 2.104 ---------------------------------------------------------------------------------------------

async def _pin(cloud, sid: str, zone, mv: str = "2.104", headers=None):
    return await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {"pinned_availability_zone": zone}},
                                   headers=headers or _h(mv))


async def test_unpin_and_repin(cloud):
    sid = await _active(cloud, "2.104", availability_zone="nova")
    assert (await _show(cloud, sid, "2.104"))["pinned_availability_zone"] == "nova"
    updated = assert_schema("servers.update_server", await _pin(cloud, sid, None))["server"]
    assert updated["pinned_availability_zone"] is None
    assert (await _show(cloud, sid, "2.104"))["pinned_availability_zone"] is None
    assert assert_schema("servers.update_server", await _pin(cloud, sid, None))["server"][
        "pinned_availability_zone"] is None  # idempotent
    r = await _pin(cloud, sid, "elsewhere")  # only the zone the server is in
    assert r.status_code == 409 and "current availability zone 'nova'" in r.json()["conflictingRequest"]["message"]
    updated = assert_schema("servers.update_server", await _pin(cloud, sid, "nova"))["server"]
    assert updated["pinned_availability_zone"] == "nova"
    assert (await _show(cloud, sid, "2.104"))["pinned_availability_zone"] == "nova"
    assert (await _pin(cloud, sid, "nova")).status_code == 200  # idempotent
    r = await _pin(cloud, sid, "other")  # pinned: unpin first
    assert r.status_code == 409 and "Unpin first" in r.json()["conflictingRequest"]["message"]
    assert (await _show(cloud, sid, "2.104"))["pinned_availability_zone"] == "nova"


async def test_pin_with_other_fields_is_all_or_nothing(cloud):
    sid = await _active(cloud, "2.104")
    r = await cloud.compute.put(f"/v2.1/servers/{sid}", json={"server": {
        "name": "renamed", "pinned_availability_zone": "elsewhere"}}, headers=_h("2.104"))
    assert r.status_code == 409
    assert (await _show(cloud, sid, "2.104"))["name"] != "renamed"  # nothing half-written
    updated = await _update(cloud, sid, "2.104", name="renamed", pinned_availability_zone="nova")
    assert updated["name"] == "renamed" and updated["pinned_availability_zone"] == "nova"


async def test_pin_needs_2_104_and_a_valid_zone(cloud):
    sid = await _active(cloud, "2.104")
    assert (await _pin(cloud, sid, None, mv="2.103")).status_code == 400
    for bad in ("", " lead", 5, ["nova"], "x" * 256):
        r = await _pin(cloud, sid, bad)
        assert r.status_code == 400 and "badRequest" in r.json(), bad


async def test_pin_is_scoped_to_the_project(cloud):
    sid = await _active(cloud, "2.104")
    r = await _pin(cloud, sid, None, headers=_h("2.104", member("o" * 32)))
    assert r.status_code == 404


# networks "auto" (2.37) through the whole cloud: the project's auto-allocated topology ------------

async def test_auto_networks_boot_on_the_auto_allocated_topology(tmp_path):
    from tests.clouds import start_cloud, stop_cloud
    cloud = await start_cloud(tmp_path, fake_hosts=2)
    try:
        headers = _h("2.37", member("a" * 32))
        body = {"name": "auto", "imageRef": await cloud.default_image(), "flavorRef": "1", "networks": "auto",
                "min_count": 3}
        r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=headers)
        assert r.status_code == 400 and "Unable to automatically allocate a network" in r.text  # no default
        ext = (await cloud.network.post("/v2.0/networks", json={"network": {
            "name": "public", "router:external": True, "is_default": True}})).json()["network"]
        r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
            "network_id": ext["id"], "cidr": "172.30.0.0/24", "ip_version": 4, "enable_dhcp": False}})
        assert r.status_code == 201
        r = await cloud.compute.post("/v2.1/servers", json={"server": body}, headers=headers)
        assert r.status_code == 202, r.text
        servers = (await cloud.compute.get("/v2.1/servers?name=auto", headers=headers)).json()["servers"]
        assert len(servers) == 3
        networks = set()
        for server in servers:
            shown = await cloud.wait_status(server["id"], "ACTIVE", headers=headers)
            networks |= set(shown["addresses"])
        assert networks == {"auto_allocated_network"}
        own = (await cloud.network.get("/v2.0/networks", params={"project_id": "a" * 32})).json()["networks"]
        assert [n["name"] for n in own] == ["auto_allocated_network"]
    finally:
        await stop_cloud(cloud)
