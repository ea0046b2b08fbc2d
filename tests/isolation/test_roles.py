"""Roles: a member calling an admin API gets 403 in that API's own error body; a reader can list and
show in its project but cannot create or change anything; the admin can do both."""

from __future__ import annotations

import pytest

from .helpers import Api, Tenancy, image_id, wait_server

NOVA_2_53 = {"OpenStack-API-Version": "compute 2.53"}


def assert_forbidden(r, api: str, rule: str | None = None) -> None:
    assert r.status_code == 403, (r.request.method, str(r.request.url), r.status_code, r.text)
    body = r.json()
    if api == "compute":
        assert set(body) == {"forbidden"} and body["forbidden"]["code"] == 403, body
        if rule:
            assert body["forbidden"]["message"] == f"Policy doesn't allow {rule} to be performed.", body
    elif api == "network":
        assert body["NeutronError"]["type"] in ("PolicyNotAuthorized", "HTTPForbidden"), body
        if rule:
            assert body["NeutronError"]["message"] == f"(rule:{rule}) is disallowed by policy", body
    elif api == "image":
        assert body["code"] == "403 Forbidden" and body["title"] == "Forbidden", body
        if rule:
            assert body["message"] == f"You are not authorized to complete {rule} action.", body
    elif api == "identity":
        assert body["error"]["code"] == 403 and body["error"]["title"] == "Forbidden", body
        if rule:
            assert body["error"]["message"] == (
                f"You are not authorized to perform the requested action: {rule}."), body
    else:
        raise AssertionError(api)


def admin_calls(t: Tenancy) -> list[tuple[str, str, str, object, str | None]]:
    """(api, method, path, body, policy rule) of admin-only calls, as upstream."""
    a_project, b_project = t.a_project, t.b_project
    return [
        ("compute", "GET", "/os-services", None, "os_compute_api:os-services:list"),
        ("compute", "PUT", "/os-services/disable", {"host": "localhost", "binary": "nova-compute"},
         "os_compute_api:os-services:update"),
        ("compute", "DELETE", "/os-services/1", None, "os_compute_api:os-services:delete"),
        ("compute", "GET", "/os-hypervisors", None, "os_compute_api:os-hypervisors:list"),
        ("compute", "GET", "/os-hypervisors/detail", None, "os_compute_api:os-hypervisors:list-detail"),
        ("compute", "GET", "/os-hypervisors/statistics", None, "os_compute_api:os-hypervisors:statistics"),
        ("compute", "GET", "/os-hypervisors/1", None, "os_compute_api:os-hypervisors:show"),
        ("compute", "GET", "/os-hypervisors/local/search", None, "os_compute_api:os-hypervisors:search"),
        ("compute", "POST", "/flavors", {"flavor": {"name": "mine", "ram": 64, "vcpus": 1, "disk": 1}},
         "os_compute_api:os-flavor-manage:create"),
        ("compute", "DELETE", "/flavors/42", None, "os_compute_api:os-flavor-manage:delete"),
        ("compute", "POST", "/flavors/42/os-extra_specs", {"extra_specs": {"k": "v"}},
         "os_compute_api:os-flavor-extra-specs:create"),
        ("compute", "PUT", "/flavors/42/os-extra_specs/k", {"k": "v"}, "os_compute_api:os-flavor-extra-specs:update"),
        ("compute", "DELETE", "/flavors/42/os-extra_specs/k", None, "os_compute_api:os-flavor-extra-specs:delete"),
        ("compute", "GET", "/flavors/42/os-flavor-access", None, "os_compute_api:os-flavor-access"),
        ("compute", "POST", "/flavors/42/action", {"addTenantAccess": {"tenant": b_project}},
         "os_compute_api:os-flavor-access:add_tenant_access"),
        ("compute", "GET", "/servers/detail?all_tenants=1", None, "os_compute_api:servers:detail:get_all_tenants"),
        ("compute", "GET", "/servers?all_tenants=True", None, "os_compute_api:servers:index:get_all_tenants"),
        ("compute", "GET", f"/os-quota-sets/{b_project}", None, "os_compute_api:os-quota-sets:show"),
        ("compute", "PUT", f"/os-quota-sets/{a_project}", {"quota_set": {"instances": 50}},
         "os_compute_api:os-quota-sets:update"),
        ("compute", "DELETE", f"/os-quota-sets/{a_project}", None, "os_compute_api:os-quota-sets:delete"),
        ("compute", "GET", "/os-quota-class-sets/default", None, "os_compute_api:os-quota-class-sets:show"),
        ("compute", "GET", f"/limits?tenant_id={b_project}", None, "os_compute_api:limits:other_project"),
        ("compute", "GET", "/os-availability-zone/detail", None, "os_compute_api:os-availability-zone:detail"),
        ("compute", "GET", "/os-server-groups?all_projects=1", None,
         "os_compute_api:os-server-groups:index:all_projects"),
        ("compute", "POST", "/os-server-external-events",
         {"events": [{"name": "network-changed", "server_uuid": "8f0cb04c-5a5a-4b3c-9e0e-6a4f6b1b7c7e"}]}, None),
        ("network", "POST", "/v2.0/networks", {"network": {"name": "s", "shared": True}}, None),
        ("network", "POST", "/v2.0/networks", {"network": {"name": "e", "router:external": True}}, None),
        ("network", "GET", "/v2.0/quotas", None, "get_quota"),
        ("network", "GET", f"/v2.0/quotas/{b_project}", None, "get_quota"),
        ("network", "PUT", f"/v2.0/quotas/{a_project}", {"quota": {"network": 1}}, "update_quota"),
        ("network", "DELETE", f"/v2.0/quotas/{a_project}", None, "delete_quota"),
        ("image", "POST", "/v2/images", {"name": "pub", "visibility": "public"}, None),
        ("identity", "GET", "/users", None, "identity:list_users"),
        ("identity", "POST", "/users", {"user": {"name": "x"}}, "identity:create_user"),
        ("identity", "GET", "/projects", None, "identity:list_projects"),
        ("identity", "POST", "/projects", {"project": {"name": "x"}}, "identity:create_project"),
        ("identity", "PATCH", f"/projects/{a_project}", {"project": {"description": "x"}}, "identity:update_project"),
        ("identity", "DELETE", f"/projects/{b_project}", None, "identity:delete_project"),
        ("identity", "GET", "/roles", None, "identity:list_roles"),
        ("identity", "POST", "/roles", {"role": {"name": "x"}}, "identity:create_role"),
        ("identity", "PUT", f"/projects/{a_project}/users/{t.b.user_id}/roles/x", None, "identity:create_grant"),
        ("identity", "GET", "/domains", None, "identity:list_domains"),
        ("identity", "GET", "/services", None, "identity:list_services"),
        ("identity", "GET", "/endpoints", None, "identity:list_endpoints"),
    ]


def _call(api: Api, service: str, method: str, path: str, body) -> object:
    params = None
    if "?" in path:
        path, query = path.split("?", 1)
        params = dict(p.split("=", 1) for p in query.split("&"))
    return api.request(method, service, path, json=body, params=params)


def test_member_calling_admin_apis_gets_403(tenancy: Tenancy):
    for service, method, path, body, rule in admin_calls(tenancy):
        r = _call(tenancy.a, service, method, path, body)
        assert_forbidden(r, service, rule)


def test_forced_host_is_admin_only(tenancy: Tenancy):
    a = tenancy.a
    r = a.post("compute", "/servers", {"server": {"name": "forced", "imageRef": image_id(a), "flavorRef": "42",
                                                  "availability_zone": "nova:localhost"}})
    assert_forbidden(r, "compute", "os_compute_api:servers:create:forced_host")


def test_admin_may_call_them(tenancy: Tenancy):
    admin = tenancy.admin
    for path in ("/os-services", "/os-hypervisors/detail", "/os-hypervisors/statistics",
                 "/os-availability-zone/detail", f"/os-quota-sets/{tenancy.a_project}",
                 "/os-quota-class-sets/default", f"/limits?tenant_id={tenancy.a_project}",
                 "/servers/detail?all_tenants=1"):
        r = _call(admin, "compute", "GET", path, None)
        assert r.status_code == 200, (path, r.text)
    for service, path in (("network", "/v2.0/quotas"), ("identity", "/users"), ("identity", "/projects")):
        assert admin.get(service, path).status_code == 200, path


# Readers ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def a_things(tenancy: Tenancy) -> dict:
    a = tenancy.a
    net = a.post("network", "/v2.0/networks", {"network": {"name": "roles-net"}}).json()["network"]["id"]
    r = a.post("network", "/v2.0/subnets", {"subnet": {"network_id": net, "cidr": "10.91.0.0/24", "ip_version": 4}})
    assert r.status_code == 201, r.text
    sg = a.post("network", "/v2.0/security-groups", {"security_group": {"name": "roles-sg"}}).json()
    r = a.post("compute", "/servers", {"server": {"name": "roles-vm", "imageRef": image_id(a), "flavorRef": "42",
                                                  "networks": [{"uuid": net}]}})
    assert r.status_code == 202, r.text
    server = r.json()["server"]["id"]
    wait_server(a, server)
    group = a.post("compute", "/os-server-groups", {"server_group": {
        "name": "roles-group", "policies": ["anti-affinity"]}}).json()["server_group"]["id"]
    image = a.post("image", "/v2/images", {"name": "roles-image", "disk_format": "raw",
                                           "container_format": "bare"}).json()["id"]
    return {"network": net, "security_group": sg["security_group"]["id"], "server": server, "group": group,
            "image": image}


def test_reader_can_list_and_show(tenancy: Tenancy, a_things: dict):
    reader = tenancy.a_reader
    for service, path in (
        ("compute", "/servers"), ("compute", "/servers/detail"), ("compute", f"/servers/{a_things['server']}"),
        ("compute", f"/servers/{a_things['server']}/metadata"),
        ("compute", f"/servers/{a_things['server']}/os-instance-actions"),
        ("compute", f"/servers/{a_things['server']}/ips"),
        ("compute", "/flavors/detail"), ("compute", "/flavors/42/os-extra_specs"), ("compute", "/limits"),
        ("compute", f"/os-quota-sets/{tenancy.a_project}"), ("compute", "/os-availability-zone"),
        ("compute", "/os-server-groups"), ("compute", f"/os-server-groups/{a_things['group']}"),
        ("compute", "/os-keypairs"),
        ("network", "/v2.0/networks"), ("network", f"/v2.0/networks/{a_things['network']}"),
        ("network", "/v2.0/subnets"), ("network", "/v2.0/ports"), ("network", "/v2.0/security-groups"),
        ("network", f"/v2.0/quotas/{tenancy.a_project}"),
        ("image", "/v2/images"), ("image", f"/v2/images/{a_things['image']}"),
        ("identity", f"/projects/{tenancy.a_project}"), ("identity", "/auth/projects"),
    ):
        r = reader.get(service, path)
        assert r.status_code == 200, (service, path, r.status_code, r.text)
    servers = reader.get("compute", "/servers").json()["servers"]
    assert a_things["server"] in {s["id"] for s in servers}


def test_reader_cannot_create_or_change(tenancy: Tenancy, a_things: dict):
    reader, sid = tenancy.a_reader, a_things["server"]
    img = image_id(reader)
    calls = [
        ("compute", "POST", "/servers", {"server": {"name": "r", "imageRef": img, "flavorRef": "42"}},
         "os_compute_api:servers:create"),
        ("compute", "PUT", f"/servers/{sid}", {"server": {"name": "r"}}, "os_compute_api:servers:update"),
        ("compute", "DELETE", f"/servers/{sid}", None, "os_compute_api:servers:delete"),
        ("compute", "POST", f"/servers/{sid}/action", {"os-stop": None}, "os_compute_api:servers:stop"),
        ("compute", "POST", f"/servers/{sid}/action", {"reboot": {"type": "SOFT"}}, "os_compute_api:servers:reboot"),
        ("compute", "POST", f"/servers/{sid}/action", {"pause": None}, "os_compute_api:os-pause-server:pause"),
        ("compute", "POST", f"/servers/{sid}/action", {"lock": None}, "os_compute_api:os-lock-server:lock"),
        ("compute", "POST", f"/servers/{sid}/metadata", {"metadata": {"k": "v"}},
         "os_compute_api:server-metadata:create"),
        ("compute", "PUT", f"/servers/{sid}/metadata", {"metadata": {}}, "os_compute_api:server-metadata:update_all"),
        ("compute", "POST", "/os-server-groups", {"server_group": {"name": "r", "policies": ["affinity"]}},
         "os_compute_api:os-server-groups:create"),
        ("compute", "DELETE", f"/os-server-groups/{a_things['group']}", None, "os_compute_api:os-server-groups:delete"),
        ("network", "POST", "/v2.0/networks", {"network": {"name": "r"}}, "create_network"),
        ("network", "PUT", f"/v2.0/networks/{a_things['network']}", {"network": {"name": "r"}}, "update_network"),
        ("network", "DELETE", f"/v2.0/networks/{a_things['network']}", None, "delete_network"),
        ("network", "POST", "/v2.0/subnets", {"subnet": {"network_id": a_things["network"], "cidr": "10.92.0.0/24",
                                                         "ip_version": 4}}, "create_subnet"),
        ("network", "POST", "/v2.0/ports", {"port": {"network_id": a_things["network"]}}, "create_port"),
        ("network", "POST", "/v2.0/security-groups", {"security_group": {"name": "r"}}, "create_security_group"),
        ("network", "POST", "/v2.0/security-group-rules", {"security_group_rule": {
            "security_group_id": a_things["security_group"], "direction": "ingress"}}, "create_security_group_rule"),
        ("network", "DELETE", f"/v2.0/security-groups/{a_things['security_group']}", None, "delete_security_group"),
        ("image", "POST", "/v2/images", {"name": "r", "disk_format": "raw", "container_format": "bare"}, "add_image"),
        ("image", "DELETE", f"/v2/images/{a_things['image']}", None, "delete_image"),
    ]
    for service, method, path, body, rule in calls:
        assert_forbidden(reader.request(method, service, path, json=body), service, rule)
    r = reader.patch("image", f"/v2/images/{a_things['image']}", [{"op": "replace", "path": "/name", "value": "r"}],
                     headers={"Content-Type": "application/openstack-images-v2.1-json-patch"})
    assert_forbidden(r, "image", "modify_image")
    # Nothing changed.
    server = wait_server(tenancy.a, sid)
    assert server["name"] == "roles-vm" and server["status"] == "ACTIVE"
    assert tenancy.a.get("network", f"/v2.0/networks/{a_things['network']}").status_code == 200


def test_member_can_do_what_reader_cannot(tenancy: Tenancy, a_things: dict):
    a, sid = tenancy.a, a_things["server"]
    r = a.post("compute", f"/servers/{sid}/metadata", {"metadata": {"k": "v"}})
    assert r.status_code == 200, r.text
    r = a.post("compute", f"/servers/{sid}/action", {"os-stop": None})
    assert r.status_code == 202, r.text
    wait_server(a, sid, "SHUTOFF")
    r = a.post("network", "/v2.0/security-groups", {"security_group": {"name": "member-sg"}})
    assert r.status_code == 201, r.text
