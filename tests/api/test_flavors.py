"""/v2.1/flavors: list, detail, show, create, delete, extra specs, access."""

from __future__ import annotations

from tests.api.conftest import ADMIN, PROJECT, member
from tests.schemas import assert_schema


async def _create(client, headers=ADMIN, **flavor):
    body = {"name": "f1", "ram": 256, "vcpus": 1, "disk": 1, **flavor}
    return await client.post("/v2.1/flavors", json={"flavor": body}, headers=headers)


async def test_default_flavors_listed(client, rt):
    from nefos.control.compute.flavors import ensure_default_flavors
    await ensure_default_flavors(rt.db)  # idempotent
    r = await client.get("/v2.1/flavors")
    body = assert_schema("flavors.list_flavors", r)
    names = {f["id"]: f["name"] for f in body["flavors"]}
    assert names == {"1": "m1.tiny", "2": "m1.small", "3": "m1.medium", "4": "m1.large",
                     "5": "m1.xlarge", "42": "m1.nano", "84": "m1.micro"}
    assert [f["id"] for f in body["flavors"]] == sorted(names)  # sorted by flavorid, as strings
    assert body["flavors"][0]["links"][0] == {"rel": "self", "href": "http://nefos/v2.1/flavors/1"}
    assert body["flavors"][0]["links"][1] == {"rel": "bookmark", "href": "http://nefos/flavors/1"}
    assert "flavors_links" not in body


async def test_detail_show_and_fields(client):
    r = await client.get("/v2.1/flavors/detail", headers=member())
    body = assert_schema("flavors.list_flavors_details", r)
    tiny = next(f for f in body["flavors"] if f["id"] == "1")
    assert tiny == {
        "id": "1", "name": "m1.tiny", "ram": 512, "disk": 1, "vcpus": 1, "swap": "",
        "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": False,
        "os-flavor-access:is_public": True, "rxtx_factor": 1.0, "links": tiny["links"]}
    r = await client.get("/v2.1/flavors/42", headers=member())
    flavor = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert (flavor["name"], flavor["ram"], flavor["disk"]) == ("m1.nano", 128, 0)
    r = await client.get("/v2.1/flavors/nope")
    assert r.status_code == 404
    assert r.json() == {"itemNotFound": {"code": 404, "message": "Flavor nope could not be found."}}


async def test_filters_sort_and_paging(client):
    r = await client.get("/v2.1/flavors/detail", params={"minRam": 4096, "minDisk": 80})
    assert [f["id"] for f in assert_schema("flavors.list_flavors_details", r)["flavors"]] == ["4", "5"]
    r = await client.get("/v2.1/flavors", params={"sort_key": "memory_mb", "sort_dir": "desc"})
    assert [f["id"] for f in r.json()["flavors"]] == ["5", "4", "3", "2", "1", "84", "42"]
    r = await client.get("/v2.1/flavors", params={"sort_key": "memory_mb", "limit": 2})
    body = assert_schema("flavors.list_flavors", r)
    assert [f["id"] for f in body["flavors"]] == ["42", "84"]
    nxt = body["flavors_links"][0]
    assert nxt["rel"] == "next" and "marker=84" in nxt["href"] and "limit=2" in nxt["href"]
    r = await client.get("/v2.1/flavors", params={"sort_key": "memory_mb", "limit": 2, "marker": "84"})
    assert [f["id"] for f in r.json()["flavors"]] == ["1", "2"]
    r = await client.get("/v2.1/flavors/detail", params={"limit": 3, "marker": "3"})
    body = assert_schema("flavors.list_flavors_details", r)
    assert [f["id"] for f in body["flavors"]] == ["4", "42", "5"]
    assert body["flavors_links"][0]["href"].startswith("http://nefos/v2.1/flavors/detail?")


async def test_create_show_delete(client):
    r = await _create(client, name="custom", id="c1", ram="1024", vcpus=2, disk=10, swap=512,
                      **{"OS-FLV-EXT-DATA:ephemeral": 5, "rxtx_factor": 2.5})
    flavor = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert (flavor["id"], flavor["ram"], flavor["swap"], flavor["OS-FLV-EXT-DATA:ephemeral"],
            flavor["rxtx_factor"]) == ("c1", 1024, 512, 5, 2.5)
    r = await _create(client, name="auto")
    auto = assert_schema("flavors.create_update_get_flavor_details", r)["flavor"]
    assert len(auto["id"]) == 36
    r = await _create(client, name="custom", id="other")
    assert r.status_code == 409
    assert r.json()["conflictingRequest"]["message"] == "Flavor with name custom already exists."
    r = await _create(client, name="again", id="c1")
    assert r.status_code == 409 and "ID c1" in r.json()["conflictingRequest"]["message"]
    r = await client.delete("/v2.1/flavors/c1")
    assert_schema("flavors.delete_flavor", r)
    assert (await client.get("/v2.1/flavors/c1")).status_code == 404
    assert (await client.delete("/v2.1/flavors/c1")).status_code == 404


async def test_non_admin_cannot_manage(client):
    r = await _create(client, headers=member())
    assert r.status_code == 403
    assert "os_compute_api:os-flavor-manage:create" in r.json()["forbidden"]["message"]
    assert (await client.delete("/v2.1/flavors/1", headers=member())).status_code == 403
    r = await client.post("/v2.1/flavors/1/os-extra_specs", json={"extra_specs": {"a": "b"}}, headers=member())
    assert r.status_code == 403


async def test_private_flavor_access(client):
    r = await _create(client, name="private", id="p1", **{"os-flavor-access:is_public": False})
    assert r.json()["flavor"]["os-flavor-access:is_public"] is False
    assert (await client.get("/v2.1/flavors/p1", headers=member())).status_code == 404
    ids = [f["id"] for f in (await client.get("/v2.1/flavors", headers=member())).json()["flavors"]]
    assert "p1" not in ids
    # Admins see private flavors with is_public=false / none.
    r = await client.get("/v2.1/flavors", params={"is_public": "false"})
    assert [f["id"] for f in r.json()["flavors"]] == ["p1"]
    r = await client.get("/v2.1/flavors", params={"is_public": "none"})
    assert len(r.json()["flavors"]) == 8
    r = await client.post("/v2.1/flavors/p1/action", json={"addTenantAccess": {"tenant": PROJECT}})
    assert assert_schema("flavors_access.add_remove_list_flavor_access", r)["flavor_access"] == [
        {"flavor_id": "p1", "tenant_id": PROJECT}]
    r = await client.post("/v2.1/flavors/p1/action", json={"addTenantAccess": {"tenant": PROJECT}})
    assert r.status_code == 409
    assert (await client.get("/v2.1/flavors/p1", headers=member())).status_code == 200
    ids = [f["id"] for f in (await client.get("/v2.1/flavors", headers=member())).json()["flavors"]]
    assert "p1" in ids
    r = await client.get("/v2.1/flavors/p1/os-flavor-access")
    assert_schema("flavors_access.add_remove_list_flavor_access", r)
    r = await client.post("/v2.1/flavors/p1/action", json={"removeTenantAccess": {"tenant": PROJECT}})
    assert assert_schema("flavors_access.add_remove_list_flavor_access", r)["flavor_access"] == []
    r = await client.post("/v2.1/flavors/p1/action", json={"removeTenantAccess": {"tenant": PROJECT}})
    assert r.status_code == 404
    r = await client.get("/v2.1/flavors/1/os-flavor-access")
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == "Access list not available for public flavors."
    r = await client.post("/v2.1/flavors/1/action", json={"addTenantAccess": {"tenant": PROJECT}})
    assert r.status_code == 409


async def test_extra_specs(client, rt):
    r = await client.post("/v2.1/flavors/1/os-extra_specs",
                          json={"extra_specs": {"hw:cpu_policy": "dedicated", "quota:cpu_shares": 1024}})
    assert assert_schema("flavors_extra_specs.set_get_flavor_extra_specs", r)["extra_specs"] == {
        "hw:cpu_policy": "dedicated", "quota:cpu_shares": "1024"}
    r = await client.get("/v2.1/flavors/1/os-extra_specs", headers=member())
    assert assert_schema("flavors_extra_specs.set_get_flavor_extra_specs", r)["extra_specs"]["hw:cpu_policy"] \
        == "dedicated"
    r = await client.get("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy")
    assert assert_schema("flavors_extra_specs.set_get_flavor_extra_specs_key", r) == {"hw:cpu_policy": "dedicated"}
    r = await client.put("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy", json={"hw:cpu_policy": "shared"})
    assert assert_schema("flavors_extra_specs.set_get_flavor_extra_specs_key", r) == {"hw:cpu_policy": "shared"}
    r = await client.put("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy", json={"other": "x"})
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Request body and URI mismatch"
    r = await client.delete("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy")
    assert_schema("flavors_extra_specs.unset_flavor_extra_specs", r)
    r = await client.get("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy")
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == "Flavor 1 has no extra specs with key hw:cpu_policy."
    assert (await client.delete("/v2.1/flavors/1/os-extra_specs/hw:cpu_policy")).status_code == 404
    from nefos.control.compute.flavors import get_by_flavor_id
    flavor = await get_by_flavor_id(rt.db, "1")
    assert flavor["extra_specs"] == {"quota:cpu_shares": "1024"}
    assert {k: flavor[k] for k in ("flavorid", "name", "memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap",
                                   "is_public", "disabled")} == {
        "flavorid": "1", "name": "m1.tiny", "memory_mb": 512, "vcpus": 1, "root_gb": 1, "ephemeral_gb": 0,
        "swap": 0, "is_public": True, "disabled": False}
    assert isinstance(flavor["id"], int)


async def test_get_by_flavor_id_respects_visibility(client, rt):
    from nefos import exceptions
    from nefos.control.compute.flavors import get_by_flavor_id
    from nefos.context import RequestContext
    await _create(client, name="hidden", id="h1", **{"os-flavor-access:is_public": False})
    assert (await get_by_flavor_id(rt.db, "h1"))["is_public"] is False
    ctx = RequestContext(project_id="x" * 32, user_id="y" * 32, roles=["member"], is_admin=False)
    try:
        await get_by_flavor_id(rt.db, "h1", ctx)
    except exceptions.FlavorNotFound:
        pass
    else:
        raise AssertionError("a private flavor leaked to another project")
