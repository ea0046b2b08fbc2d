"""Project B can neither see nor change project A's resources, of every type, through every API.

Everything goes through `nefos up`'s HTTP APIs with tokens from its identity API. Codes are
upstream's: resources of another project are 404 (Nova servers, Neutron, Glance, key pairs),
policy-checked ones whose existence Nova reveals are 403 (server groups, quotas, limits).
"""

from __future__ import annotations

import pytest

from .helpers import Tenancy, image_id, wait_server


@pytest.fixture(scope="module")
def a_res(tenancy: Tenancy) -> dict:
    """One of every resource type, made by project A's member."""
    a = tenancy.a
    res: dict = {}
    r = a.post("network", "/v2.0/networks", {"network": {"name": "a-net"}})
    assert r.status_code == 201, r.text
    res["network"] = r.json()["network"]["id"]
    r = a.post("network", "/v2.0/subnets", {"subnet": {"network_id": res["network"], "cidr": "10.81.0.0/24",
                                                        "ip_version": 4, "name": "a-subnet"}})
    assert r.status_code == 201, r.text
    res["subnet"] = r.json()["subnet"]["id"]
    r = a.post("network", "/v2.0/ports", {"port": {"network_id": res["network"], "name": "a-port"}})
    assert r.status_code == 201, r.text
    res["port"] = r.json()["port"]["id"]
    r = a.post("network", "/v2.0/security-groups", {"security_group": {"name": "a-sg"}})
    assert r.status_code == 201, r.text
    res["security_group"] = r.json()["security_group"]["id"]
    r = a.post("network", "/v2.0/security-group-rules", {"security_group_rule": {
        "security_group_id": res["security_group"], "direction": "ingress", "protocol": "tcp",
        "port_range_min": 22, "port_range_max": 22}})
    assert r.status_code == 201, r.text
    res["security_group_rule"] = r.json()["security_group_rule"]["id"]
    r = a.post("compute", "/os-keypairs", {"keypair": {"name": "a-key"}})
    assert r.status_code in (200, 201), r.text
    res["keypair"] = "a-key"
    r = a.post("compute", "/os-server-groups", {"server_group": {"name": "a-group", "policies": ["affinity"]}})
    assert r.status_code == 200, r.text
    res["server_group"] = r.json()["server_group"]["id"]
    r = a.post("image", "/v2/images", {"name": "a-image", "disk_format": "raw", "container_format": "bare",
                                       "visibility": "private"})
    assert r.status_code == 201, r.text
    res["image"] = r.json()["id"]
    r = a.request("PUT", "image", f"/v2/images/{res['image']}/file", content=b"\0" * 1024,
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 204, r.text
    r = a.post("compute", "/servers", {"server": {
        "name": "a-vm", "imageRef": image_id(a), "flavorRef": "42", "key_name": "a-key",
        "networks": [{"uuid": res["network"]}], "metadata": {"owner": "a"}},
        "os:scheduler_hints": {"group": res["server_group"]}})
    assert r.status_code == 202, r.text
    res["server"] = r.json()["server"]["id"]
    wait_server(a, res["server"])
    return res


def _ids(r, key: str) -> set[str]:
    assert r.status_code == 200, r.text
    return {item["id"] for item in r.json()[key]}


# Servers --------------------------------------------------------------------------------------------

def test_servers_invisible_and_untouchable(tenancy: Tenancy, a_res: dict):
    a, b, sid = tenancy.a, tenancy.b, a_res["server"]
    assert sid in _ids(a.get("compute", "/servers"), "servers")
    assert sid not in _ids(b.get("compute", "/servers"), "servers")
    assert sid not in _ids(b.get("compute", "/servers/detail"), "servers")
    assert sid not in _ids(b.get("compute", "/servers", params={"name": "a-vm"}), "servers")
    for method, path, body in [
        ("GET", f"/servers/{sid}", None),
        ("PUT", f"/servers/{sid}", {"server": {"name": "stolen"}}),
        ("POST", f"/servers/{sid}/action", {"os-stop": None}),
        ("POST", f"/servers/{sid}/action", {"reboot": {"type": "HARD"}}),
        ("POST", f"/servers/{sid}/action", {"lock": None}),
        ("GET", f"/servers/{sid}/metadata", None),
        ("POST", f"/servers/{sid}/metadata", {"metadata": {"x": "y"}}),
        ("DELETE", f"/servers/{sid}/metadata/owner", None),
        ("GET", f"/servers/{sid}/os-instance-actions", None),
        ("GET", f"/servers/{sid}/ips", None),
        ("DELETE", f"/servers/{sid}", None),
    ]:
        r = b.request(method, "compute", path, json=body)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert "itemNotFound" in r.json()
    # Still A's and untouched.
    server = wait_server(a, sid)
    assert server["name"] == "a-vm" and server["metadata"] == {"owner": "a"}


def test_all_tenants_is_admin_only(tenancy: Tenancy, a_res: dict):
    r = tenancy.b.get("compute", "/servers/detail", params={"all_tenants": "1"})
    assert r.status_code == 403, r.text
    assert r.json()["forbidden"]["message"] == (
        "Policy doesn't allow os_compute_api:servers:detail:get_all_tenants to be performed.")
    r = tenancy.admin.get("compute", "/servers/detail", params={"all_tenants": "1", "tenant_id": tenancy.a_project})
    assert a_res["server"] in _ids(r, "servers")
    # tenant_id alone is ignored (Nova's lp:#1185290): the admin sees only the admin project.
    r = tenancy.admin.get("compute", "/servers/detail", params={"tenant_id": tenancy.a_project})
    assert a_res["server"] not in _ids(r, "servers")


# Key pairs (per user) --------------------------------------------------------------------------------

def test_keypairs_are_per_user(tenancy: Tenancy, a_res: dict):
    for other in (tenancy.b, tenancy.a_reader):  # another project, and another user of the same one
        names = [k["keypair"]["name"] for k in other.get("compute", "/os-keypairs").json()["keypairs"]]
        assert "a-key" not in names
        assert other.get("compute", "/os-keypairs/a-key").status_code == 404
        assert other.delete("compute", "/os-keypairs/a-key").status_code == 404
        r = other.get("compute", "/os-keypairs", params={"user_id": tenancy.a.user_id},
                      headers={"OpenStack-API-Version": "compute 2.10"})
        assert r.status_code == 403, r.text
    assert tenancy.a.get("compute", "/os-keypairs/a-key").status_code == 200
    r = tenancy.admin.get("compute", "/os-keypairs/a-key", params={"user_id": tenancy.a.user_id},
                          headers={"OpenStack-API-Version": "compute 2.10"})
    assert r.status_code == 200, r.text


# Server groups -----------------------------------------------------------------------------------------

def test_server_groups(tenancy: Tenancy, a_res: dict):
    gid, b = a_res["server_group"], tenancy.b
    assert gid not in _ids(b.get("compute", "/os-server-groups"), "server_groups")
    assert b.get("compute", "/os-server-groups/{}".format(gid)).status_code == 403
    assert b.delete("compute", f"/os-server-groups/{gid}").status_code == 403
    assert b.get("compute", "/os-server-groups", params={"all_projects": "1"}).status_code == 403
    # B cannot put its server into A's group.
    r = b.post("compute", "/servers", {"server": {"name": "b-vm", "imageRef": image_id(b), "flavorRef": "42",
                                                  "networks": "none"},
                                       "os:scheduler_hints": {"group": gid}},
               headers={"OpenStack-API-Version": "compute 2.37"})
    assert r.status_code == 400, r.text
    r = tenancy.a.get("compute", f"/os-server-groups/{gid}")
    assert r.status_code == 200 and r.json()["server_group"]["members"] == [a_res["server"]]


# Networking ---------------------------------------------------------------------------------------------

NETWORK_KINDS = [("networks", "network", {"name": "stolen"}), ("subnets", "subnet", {"name": "stolen"}),
                 ("ports", "port", {"name": "stolen"}),
                 ("security-groups", "security_group", {"name": "stolen"})]


@pytest.mark.parametrize("collection,member,update", NETWORK_KINDS)
def test_network_resources(tenancy: Tenancy, a_res: dict, collection, member, update):
    rid, b = a_res[member], tenancy.b
    key = collection.replace("-", "_")
    assert rid in _ids(tenancy.a.get("network", f"/v2.0/{collection}"), key)
    assert rid not in _ids(b.get("network", f"/v2.0/{collection}"), key)
    assert rid not in _ids(b.get("network", f"/v2.0/{collection}", params={"id": rid}), key)
    for method, body in (("GET", None), ("PUT", {member: update}), ("DELETE", None)):
        r = b.request(method, "network", f"/v2.0/{collection}/{rid}", json=body)
        assert r.status_code == 404, (method, collection, r.status_code, r.text)
        assert "NeutronError" in r.json()
    assert tenancy.a.get("network", f"/v2.0/{collection}/{rid}").json()[member].get("name") != "stolen"


def test_security_group_rules(tenancy: Tenancy, a_res: dict):
    b, rid = tenancy.b, a_res["security_group_rule"]
    assert rid not in _ids(b.get("network", "/v2.0/security-group-rules"), "security_group_rules")
    assert b.get("network", f"/v2.0/security-group-rules/{rid}").status_code == 404
    assert b.delete("network", f"/v2.0/security-group-rules/{rid}").status_code == 404
    r = b.post("network", "/v2.0/security-group-rules", {"security_group_rule": {
        "security_group_id": a_res["security_group"], "direction": "ingress", "protocol": "udp"}})
    assert r.status_code == 404, r.text


def test_cannot_attach_to_another_projects_network(tenancy: Tenancy, a_res: dict):
    b = tenancy.b
    r = b.post("network", "/v2.0/subnets", {"subnet": {"network_id": a_res["network"], "cidr": "10.82.0.0/24",
                                                        "ip_version": 4}})
    assert r.status_code == 404, r.text
    r = b.post("network", "/v2.0/ports", {"port": {"network_id": a_res["network"]}})
    assert r.status_code == 404, r.text
    r = b.post("compute", "/servers", {"server": {"name": "b-vm", "imageRef": image_id(b), "flavorRef": "42",
                                                  "networks": [{"uuid": a_res["network"]}]}})
    assert r.status_code in (400, 404), r.text
    r = b.post("compute", "/servers", {"server": {"name": "b-vm", "imageRef": image_id(b), "flavorRef": "42",
                                                  "networks": [{"port": a_res["port"]}]}})
    assert r.status_code in (400, 404), r.text
    r = b.post("network", "/v2.0/networks", {"network": {"name": "x", "project_id": tenancy.a_project}})
    assert r.status_code == 400, r.text  # Neutron: another project_id needs admin


def test_shared_network_is_visible_not_changeable(tenancy: Tenancy):
    admin, b = tenancy.admin, tenancy.b
    r = admin.post("network", "/v2.0/networks", {"network": {"name": "iso-shared", "shared": True}})
    assert r.status_code == 201, r.text
    net = r.json()["network"]["id"]
    try:
        assert net in _ids(b.get("network", "/v2.0/networks"), "networks")
        assert b.get("network", f"/v2.0/networks/{net}").status_code == 200
        r = b.put("network", f"/v2.0/networks/{net}", {"network": {"name": "mine"}})
        assert r.status_code in (403, 404), r.text
        assert b.delete("network", f"/v2.0/networks/{net}").status_code in (403, 404)
        r = b.post("network", "/v2.0/networks", {"network": {"name": "x", "shared": True}})
        assert r.status_code == 403, r.text
    finally:
        assert admin.delete("network", f"/v2.0/networks/{net}").status_code == 204


# Images (visibility) ------------------------------------------------------------------------------------

def test_private_images(tenancy: Tenancy, a_res: dict):
    iid, b = a_res["image"], tenancy.b
    assert iid in {i["id"] for i in tenancy.a.get("image", "/v2/images").json()["images"]}
    assert iid not in {i["id"] for i in b.get("image", "/v2/images").json()["images"]}
    for method, path, kw in [
        ("GET", f"/v2/images/{iid}", {}),
        ("GET", f"/v2/images/{iid}/file", {}),
        ("PATCH", f"/v2/images/{iid}", {"json": [{"op": "replace", "path": "/name", "value": "stolen"}],
                                        "headers": {"Content-Type": "application/openstack-images-v2.1-json-patch"}}),
        ("PUT", f"/v2/images/{iid}/tags/stolen", {}),
        ("DELETE", f"/v2/images/{iid}", {}),
    ]:
        r = b.request(method, "image", path, **kw)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
    r = b.post("compute", "/servers", {"server": {"name": "b-vm", "imageRef": iid, "flavorRef": "42"}})
    assert r.status_code == 400, r.text
    # Nor through the Compute API's image proxy.
    assert iid in {i["id"] for i in tenancy.a.get("compute", "/images").json()["images"]}
    assert iid not in {i["id"] for i in b.get("compute", "/images/detail").json()["images"]}
    for method, path, kw in [
        ("GET", f"/images/{iid}", {}),
        ("GET", f"/images/{iid}/metadata", {}),
        ("POST", f"/images/{iid}/metadata", {"json": {"metadata": {"stolen": "1"}}}),
        ("DELETE", f"/images/{iid}", {}),
    ]:
        r = b.request(method, "compute", path, **kw)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
    # Publicizing is the admin's.
    r = tenancy.a.patch("image", f"/v2/images/{iid}", [{"op": "replace", "path": "/visibility", "value": "public"}],
                        headers={"Content-Type": "application/openstack-images-v2.1-json-patch"})
    assert r.status_code == 403, r.text


# Quotas and limits ---------------------------------------------------------------------------------------

def test_quotas_and_limits_of_another_project(tenancy: Tenancy):
    b, a_project = tenancy.b, tenancy.a_project
    assert b.get("compute", f"/os-quota-sets/{tenancy.b_project}").status_code == 200
    for path in (f"/os-quota-sets/{a_project}", f"/os-quota-sets/{a_project}/detail"):
        r = b.get("compute", path)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["forbidden"]["message"].startswith("Policy doesn't allow os_compute_api:os-quota-sets:")
    assert b.put("compute", f"/os-quota-sets/{tenancy.b_project}",
                 {"quota_set": {"instances": 100}}).status_code == 403
    assert b.get("compute", "/limits", params={"tenant_id": a_project}).status_code == 403
    assert b.get("network", f"/v2.0/quotas/{a_project}").status_code == 403
    assert b.put("network", f"/v2.0/quotas/{tenancy.b_project}", {"quota": {"network": 1000}}).status_code == 403
    assert tenancy.admin.get("compute", f"/os-quota-sets/{a_project}").status_code == 200


def test_identity_objects_of_others(tenancy: Tenancy):
    b = tenancy.b
    assert b.get("identity", f"/users/{tenancy.a.user_id}").status_code == 403
    assert b.get("identity", f"/projects/{tenancy.a_project}").status_code == 403
    assert b.get("identity", f"/users/{tenancy.a.user_id}/projects").status_code == 403
    r = b.get("identity", "/role_assignments", params={"scope.project.id": tenancy.a_project})
    assert r.status_code == 403, r.text
    r = b.get("identity", "/auth/tokens", headers={"X-Subject-Token": tenancy.a.token})
    assert r.status_code == 403, r.text
    r = b.get("identity", "/auth/tokens", headers={"X-Subject-Token": b.token})
    assert r.status_code == 200
    assert b.get("identity", f"/users/{b.user_id}").status_code == 200


def test_admin_sees_everything(tenancy: Tenancy, a_res: dict):
    admin = tenancy.admin
    assert admin.get("compute", f"/servers/{a_res['server']}").status_code == 200
    assert admin.get("network", f"/v2.0/networks/{a_res['network']}").status_code == 200
    assert admin.get("network", f"/v2.0/ports/{a_res['port']}").status_code == 200
    assert admin.get("image", f"/v2/images/{a_res['image']}").status_code == 200
    assert admin.get("compute", f"/os-server-groups/{a_res['server_group']}").status_code == 200


# Private flavors (flavor access) ------------------------------------------------------------------------

def test_private_flavor_only_for_projects_given_access(tenancy: Tenancy):
    admin, a, b = tenancy.admin, tenancy.a, tenancy.b
    r = admin.post("compute", "/flavors", {"flavor": {"name": "iso-private", "ram": 128, "vcpus": 1, "disk": 1,
                                                      "os-flavor-access:is_public": False}})
    assert r.status_code == 200, r.text
    fid = r.json()["flavor"]["id"]
    try:
        r = admin.post("compute", f"/flavors/{fid}/action", {"addTenantAccess": {"tenant": tenancy.a_project}})
        assert r.status_code == 200, r.text
        assert fid in _ids(a.get("compute", "/flavors"), "flavors")
        assert a.get("compute", f"/flavors/{fid}").status_code == 200
        assert fid not in _ids(b.get("compute", "/flavors"), "flavors")
        assert fid not in _ids(b.get("compute", "/flavors/detail", params={"is_public": "None"}), "flavors")
        assert b.get("compute", f"/flavors/{fid}").status_code == 404
        assert b.get("compute", f"/flavors/{fid}/os-extra_specs").status_code == 404
        r = b.post("compute", "/servers", {"server": {"name": "b-vm", "imageRef": image_id(b), "flavorRef": fid,
                                                      "networks": "none"}},
                   headers={"OpenStack-API-Version": "compute 2.37"})
        assert r.status_code == 400 and "badRequest" in r.json(), r.text
    finally:
        assert admin.delete("compute", f"/flavors/{fid}").status_code == 202


# Using another project's things in one's own requests ------------------------------------------------

def test_cannot_use_another_projects_key_or_security_group(tenancy: Tenancy, a_res: dict):
    b = tenancy.b
    base = {"name": "b-vm", "imageRef": image_id(b), "flavorRef": "42"}
    r = b.post("compute", "/servers", {"server": {**base, "key_name": "a-key", "networks": "none"}},
               headers={"OpenStack-API-Version": "compute 2.37"})
    assert r.status_code == 400 and "key_name" in r.json()["badRequest"]["message"], r.text
    r = b.post("network", "/v2.0/networks", {"network": {"name": "b-net"}})
    assert r.status_code == 201, r.text
    b_net = r.json()["network"]["id"]
    try:
        r = b.post("network", "/v2.0/subnets", {"subnet": {"network_id": b_net, "cidr": "10.83.0.0/24",
                                                            "ip_version": 4}})
        assert r.status_code == 201, r.text
        r = b.post("network", "/v2.0/ports", {"port": {"network_id": b_net,
                                                       "security_groups": [a_res["security_group"]]}})
        assert r.status_code == 404, r.text
        for sg in (a_res["security_group"], "a-sg"):
            r = b.post("compute", "/servers", {"server": {**base, "networks": [{"uuid": b_net}],
                                                          "security_groups": [{"name": sg}]}})
            assert r.status_code in (400, 404), (sg, r.text)
        assert [p for p in b.get("network", "/v2.0/ports").json()["ports"]
                if p["network_id"] == b_net and p["device_owner"].startswith("compute:")] == []
    finally:
        b.delete("network", f"/v2.0/networks/{b_net}")


@pytest.mark.parametrize("action", [{"os-start": None}, {"pause": None}, {"suspend": None},
                                    {"os-getConsoleOutput": {}}, {"createImage": {"name": "stolen"}},
                                    {"changePassword": {"adminPass": "stolen-pass"}},
                                    {"rebuild": {"imageRef": "70a599e0-31e7-49b7-b260-868f441e862b"}},
                                    {"addSecurityGroup": {"name": "default"}}, {"shelve": None}])
def test_no_action_on_another_projects_server(tenancy: Tenancy, a_res: dict, action):
    r = tenancy.b.post("compute", f"/servers/{a_res['server']}/action", action)
    assert r.status_code == 404 and "itemNotFound" in r.json(), r.text
    server = tenancy.a.get("compute", f"/servers/{a_res['server']}").json()["server"]
    assert (server["status"], server["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
