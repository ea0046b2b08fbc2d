"""Nova's network proxy APIs (up to 2.35) over the whole cloud: os-security-groups,
os-security-group-rules, a server's os-security-groups, os-networks, os-tenant-networks,
os-floating-ips and os-floating-ip-pools, each with Nova's views and answers, scoped to the caller's
project as the Networking API scopes it, and 404 from 2.36."""

from __future__ import annotations

import pytest

from tests.clouds import ADMIN, member, start_cloud, stop_cloud

OTHER = member(project="b" * 32, user="v" * 32)
READER = {**member(), "X-Roles": "reader"}
V236 = {"OpenStack-API-Version": "compute 2.36"}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1)
    yield harness
    await stop_cloud(harness)


async def _call(cloud, method: str, path: str, expect: int, body=None, headers=None, **kw):
    r = await cloud.compute.request(method, path, json=body, headers=headers or member(), **kw)
    assert r.status_code == expect, (method, path, r.status_code, r.text)
    return r.json() if r.content else None


async def _group(cloud, name="web", headers=None) -> dict:
    return (await _call(cloud, "POST", "/v2.1/os-security-groups", 200, {
        "security_group": {"name": name, "description": f"{name} servers"}}, headers))["security_group"]


async def _rule(cloud, expect=200, headers=None, **rule):
    body = await _call(cloud, "POST", "/v2.1/os-security-group-rules", expect, {"security_group_rule": rule},
                       headers)
    return body["security_group_rule"] if expect == 200 else body


# Security groups ------------------------------------------------------------------------------------

async def test_security_group_lifecycle(cloud):
    web = await _group(cloud, "web")
    assert web["name"] == "web" and web["description"] == "web servers" and web["rules"] == []
    assert web["tenant_id"] == "d" * 32
    db = await _group(cloud, "db")
    listed = (await _call(cloud, "GET", "/v2.1/os-security-groups", 200))["security_groups"]
    assert [g["name"] for g in listed] == ["db", "default", "web"]  # sorted by (tenant_id, name)
    default = next(g for g in listed if g["name"] == "default")
    # The default group's ingress rules name the group itself (egress rules are not Nova's).
    assert {(r["group"]["name"], r["ip_protocol"]) for r in default["rules"]} == {("default", None)}
    # Nova pages the Networking API's list (limit, offset) before sorting the page.
    pages = [(await _call(cloud, "GET", "/v2.1/os-security-groups", 200, params={"limit": 1, "offset": i})
              )["security_groups"] for i in range(4)]
    assert sorted(g["name"] for page in pages for g in page) == ["db", "default", "web"] and pages[3] == []

    tcp = await _rule(cloud, parent_group_id=web["id"], ip_protocol="tcp", from_port=22, to_port=22,
                      cidr="10.0.0.0/24")
    assert tcp["ip_range"] == {"cidr": "10.0.0.0/24"} and tcp["group"] == {}
    assert (tcp["ip_protocol"], tcp["from_port"], tcp["to_port"]) == ("tcp", 22, 22)
    # A CIDR is kept as given, host bits too (the Networking API keeps it so).
    hosty = await _rule(cloud, parent_group_id=db["id"], ip_protocol="udp", from_port=53, to_port=53,
                        cidr="10.2.3.124/24")
    assert hosty["ip_range"] == {"cidr": "10.2.3.124/24"}
    icmp = await _rule(cloud, parent_group_id=web["id"], ip_protocol="icmp", from_port=-1, to_port=-1)
    assert icmp["ip_range"] == {"cidr": "0.0.0.0/0"} and (icmp["from_port"], icmp["to_port"]) == (-1, -1)
    from_db = await _rule(cloud, parent_group_id=web["id"], group_id=db["id"], ip_protocol="tcp")
    assert from_db["group"] == {"name": "db", "tenant_id": "d" * 32} and from_db["ip_range"] == {}
    assert (from_db["from_port"], from_db["to_port"]) == (1, 65535)  # a group rule without ports: all

    shown = (await _call(cloud, "GET", f"/v2.1/os-security-groups/{web['id']}", 200, headers=READER)
             )["security_group"]
    assert {r["id"] for r in shown["rules"]} == {tcp["id"], icmp["id"], from_db["id"]}
    updated = (await _call(cloud, "PUT", f"/v2.1/os-security-groups/{web['id']}", 200, {
        "security_group": {"name": "www", "description": "renamed"}}))["security_group"]
    assert (updated["name"], updated["description"]) == ("www", "renamed")

    await _call(cloud, "DELETE", f"/v2.1/os-security-group-rules/{tcp['id']}", 202)
    await _call(cloud, "DELETE", f"/v2.1/os-security-group-rules/{tcp['id']}", 404)
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{web['id']}", 202)
    await _call(cloud, "GET", f"/v2.1/os-security-groups/{web['id']}", 404)
    # The default group cannot go (Neutron's 409 is Nova's 400).
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{default['id']}", 400)


async def test_security_group_rule_refusals(cloud):
    web = await _group(cloud)
    parent = web["id"]
    cases = [
        ({"ip_protocol": "tcp", "from_port": 30, "to_port": 20}, 400),  # from > to
        ({"ip_protocol": "tcp", "from_port": 0, "to_port": 20}, 400),
        ({"ip_protocol": "udp", "from_port": 1, "to_port": 65536}, 400),
        ({"ip_protocol": "icmp", "from_port": 256, "to_port": 0}, 400),
        ({"ip_protocol": "gre", "from_port": 1, "to_port": 2}, 400),
        ({"ip_protocol": "tcp", "from_port": "a", "to_port": 2}, 400),
        ({"ip_protocol": "tcp", "from_port": [1], "to_port": 2}, 400),
        ({"ip_protocol": "tcp"}, 400),  # a CIDR rule needs its ports
        ({"ip_protocol": "tcp", "from_port": 1, "to_port": 2, "cidr": "10.0.0.0"}, 400),
        ({"ip_protocol": "tcp", "from_port": 1, "to_port": 2, "cidr": "not-a-net/8"}, 400),
        ({"ip_protocol": "tcp", "from_port": 1, "to_port": 2, "cidr": "10.0.0.0/0"}, 400),  # bad prefix
        ({"ip_protocol": "tcp", "from_port": 1, "to_port": 2, "cidr": 5}, 400),
        ({"ip_protocol": "tcp", "from_port": 1, "to_port": 2, "group_id": "00000000-0000-0000-0000-000000000000"},
         404),
    ]
    for extra, status in cases:
        await _rule(cloud, status, parent_group_id=parent, **extra)
    await _rule(cloud, 404, parent_group_id="00000000-0000-0000-0000-000000000000", ip_protocol="tcp",
                from_port=1, to_port=2)
    for body in ({}, {"security_group_rule": {}}, {"security_group_rule": {"parent_group_id": "nope"}},
                 {"security_group_rule": {"parent_group_id": parent, "group_id": "nope"}}):
        await _call(cloud, "POST", "/v2.1/os-security-group-rules", 400, body)
    await _rule(cloud, parent_group_id=parent, ip_protocol="TCP", from_port=80, to_port=80)
    r = await _rule(cloud, 400, parent_group_id=parent, ip_protocol="tcp", from_port=80, to_port=80)
    assert "already exists" in r["badRequest"]["message"]
    assert [g for g in (await _call(cloud, "GET", f"/v2.1/os-security-groups/{parent}", 200)
                        )["security_group"]["rules"] if g["from_port"] == 80][0]["ip_protocol"] == "tcp"
    await _call(cloud, "DELETE", "/v2.1/os-security-group-rules/not-a-uuid", 400)


async def test_security_group_bad_bodies_and_ids(cloud):
    for body in ({}, {"security_group": {"name": "x"}}, {"security_group": {"description": "x"}},
                 {"security_group": {"name": "x" * 256, "description": ""}},
                 {"security_group": {"name": "x", "description": "d" * 256}},
                 {"security_group": {"name": 5, "description": ""}}, [], "x"):
        await _call(cloud, "POST", "/v2.1/os-security-groups", 400, body)
    await _call(cloud, "GET", "/v2.1/os-security-groups/not-a-uuid", 400)
    await _call(cloud, "DELETE", "/v2.1/os-security-groups/not-a-uuid", 400)
    await _call(cloud, "PUT", "/v2.1/os-security-groups/not-a-uuid", 400,
                {"security_group": {"name": "a", "description": "b"}})
    unknown = "00000000-0000-0000-0000-000000000000"
    await _call(cloud, "GET", f"/v2.1/os-security-groups/{unknown}", 404)
    await _call(cloud, "PUT", f"/v2.1/os-security-groups/{unknown}", 404,
                {"security_group": {"name": "a", "description": "b"}})
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{unknown}", 404)
    await _call(cloud, "GET", "/v2.1/os-security-groups", 400, params={"limit": "-1"})
    # No id at all: no such route (as Nova's router, no redirect to the collection).
    await _call(cloud, "DELETE", "/v2.1/os-security-groups/", 404)


async def test_security_groups_are_the_callers_projects(cloud):
    mine = await _group(cloud, "mine")
    theirs = await _group(cloud, "theirs", OTHER)
    await _call(cloud, "GET", f"/v2.1/os-security-groups/{theirs['id']}", 404)
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{theirs['id']}", 404)
    await _rule(cloud, 404, parent_group_id=theirs["id"], ip_protocol="tcp", from_port=1, to_port=2)
    await _rule(cloud, 404, parent_group_id=mine["id"], group_id=theirs["id"])
    # all_tenants is an admin's: a member still sees only its own project's groups.
    names = {g["name"] for g in (await _call(cloud, "GET", "/v2.1/os-security-groups", 200,
                                             params={"all_tenants": "1"}))["security_groups"]}
    assert "mine" in names and "theirs" not in names
    everything = (await _call(cloud, "GET", "/v2.1/os-security-groups", 200, headers=ADMIN,
                              params={"all_tenants": "1"}))["security_groups"]
    assert {mine["id"], theirs["id"]} <= {g["id"] for g in everything}
    admins = (await _call(cloud, "GET", "/v2.1/os-security-groups", 200, headers=ADMIN))["security_groups"]
    assert not {mine["id"], theirs["id"]} & {g["id"] for g in admins}
    # Policy: a reader may look, not change.
    await _call(cloud, "POST", "/v2.1/os-security-groups", 403, {"security_group": {
        "name": "r", "description": ""}}, READER)
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{mine['id']}", 403, headers=READER)


async def test_server_security_groups(cloud):
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", headers=member())
    web = await _group(cloud, "web")
    await cloud.action(sid, {"addSecurityGroup": {"name": "web"}}, headers=member())
    listed = (await _call(cloud, "GET", f"/v2.1/servers/{sid}/os-security-groups", 200, headers=READER)
              )["security_groups"]
    assert [g["name"] for g in listed] == ["default", "web"]
    # Nova's server list is there at every microversion.
    latest = {**member(), "OpenStack-API-Version": "compute 2.100"}
    assert len((await _call(cloud, "GET", f"/v2.1/servers/{sid}/os-security-groups", 200, headers=latest)
                )["security_groups"]) == 2
    await _call(cloud, "GET", f"/v2.1/servers/{sid}/os-security-groups", 404, headers=OTHER)
    # In use by the server's port: 400.
    await _call(cloud, "DELETE", f"/v2.1/os-security-groups/{web['id']}", 400)


async def test_proxy_apis_are_gone_from_2_36(cloud):
    headers = {**member(), **V236}
    for method, path in (("GET", "/v2.1/os-security-groups"), ("POST", "/v2.1/os-security-groups"),
                         ("GET", "/v2.1/os-security-groups/00000000-0000-0000-0000-000000000000"),
                         ("POST", "/v2.1/os-security-group-rules"),
                         ("DELETE", "/v2.1/os-security-group-rules/00000000-0000-0000-0000-000000000000"),
                         ("GET", "/v2.1/os-networks"), ("GET", "/v2.1/os-tenant-networks/x"),
                         ("GET", "/v2.1/os-floating-ips"), ("POST", "/v2.1/os-floating-ips"),
                         ("GET", "/v2.1/os-floating-ip-pools")):
        await _call(cloud, method, path, 404, {}, headers)


# Networks ----------------------------------------------------------------------------------------------

async def test_networks_and_tenant_networks(cloud):
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    theirs = await cloud.make_network("theirs", "10.1.0.0/24", headers=OTHER)
    listed = (await _call(cloud, "GET", "/v2.1/os-networks", 200, headers=READER))["networks"]
    assert [(n["id"], n["label"]) for n in listed] == [(net["id"], "private")]
    assert listed[0]["cidr"] is None and "bridge" not in listed[0]
    shown = (await _call(cloud, "GET", f"/v2.1/os-networks/{net['id']}", 200, headers=ADMIN))["network"]
    assert shown["label"] == "private" and "bridge" in shown and shown["project_id"] is None  # admin fields
    await _call(cloud, "GET", f"/v2.1/os-networks/{theirs['id']}", 404)
    tenant = (await _call(cloud, "GET", "/v2.1/os-tenant-networks", 200))["networks"]
    assert tenant == [{"id": net["id"], "cidr": "None", "label": "private"}]
    assert (await _call(cloud, "GET", f"/v2.1/os-tenant-networks/{net['id']}", 200))["network"]["label"] == "private"
    r = await _call(cloud, "GET", f"/v2.1/os-tenant-networks/{theirs['id']}", 404)
    assert r["itemNotFound"]["message"] == "Network not found"
    # nova-network's operations are gone, whoever asks.
    await _call(cloud, "POST", "/v2.1/os-networks", 410, {"network": {}})
    await _call(cloud, "POST", "/v2.1/os-networks/add", 410, {"id": net["id"]})
    await _call(cloud, "DELETE", f"/v2.1/os-networks/{net['id']}", 410)
    await _call(cloud, "POST", f"/v2.1/os-networks/{net['id']}/action", 410, {"disassociate": None})
    await _call(cloud, "POST", f"/v2.1/os-networks/{net['id']}/action", 400, {"explode": None})
    await _call(cloud, "POST", "/v2.1/os-tenant-networks", 410, {"network": {}})
    await _call(cloud, "DELETE", f"/v2.1/os-tenant-networks/{net['id']}", 410)


# Floating IPs ----------------------------------------------------------------------------------------

async def _public(cloud) -> dict:
    """The external network public, and the demo project's network with a router to it."""
    r = await cloud.network.post("/v2.0/networks", json={"network": {"name": "public", "router:external": True}})
    ext = r.json()["network"]
    r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": ext["id"], "cidr": "203.0.113.0/24", "ip_version": 4, "enable_dhcp": False}})
    assert r.status_code == 201, r.text
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    subnet = (await cloud.network.get("/v2.0/subnets", params={"network_id": net["id"]})).json()["subnets"][0]
    r = await cloud.network.post("/v2.0/routers", headers=member(), json={"router": {
        "name": "r", "external_gateway_info": {"network_id": ext["id"]}}})
    router = r.json()["router"]
    r = await cloud.network.put(f"/v2.0/routers/{router['id']}/add_router_interface", headers=member(),
                                json={"subnet_id": subnet["id"]})
    assert r.status_code == 200, r.text
    return {"ext": ext, "net": net}


async def test_floating_ips(cloud):
    wired = await _public(cloud)
    pools = (await _call(cloud, "GET", "/v2.1/os-floating-ip-pools", 200, headers=READER))["floating_ip_pools"]
    assert pools == [{"name": "public"}]
    fip = (await _call(cloud, "POST", "/v2.1/os-floating-ips", 200, {"pool": "public"}))["floating_ip"]
    assert fip["pool"] == "public" and fip["fixed_ip"] is None and fip["instance_id"] is None
    assert fip["ip"].startswith("203.0.113.")
    assert (await _call(cloud, "GET", f"/v2.1/os-floating-ips/{fip['id']}", 200, headers=READER)
            )["floating_ip"] == fip
    assert (await _call(cloud, "GET", "/v2.1/os-floating-ips", 200))["floating_ips"] == [fip]
    # The pool by id works too; no such pool, or Nova's default pool name "nova" absent: 404.
    by_id = (await _call(cloud, "POST", "/v2.1/os-floating-ips", 200, {"pool": wired["ext"]["id"]}))["floating_ip"]
    await _call(cloud, "POST", "/v2.1/os-floating-ips", 404, {"pool": "nowhere"})
    await _call(cloud, "POST", "/v2.1/os-floating-ips", 404, None)
    await _call(cloud, "POST", "/v2.1/os-floating-ips", 400, {"pool": 5})

    sid = (await cloud.boot(networks=[{"uuid": wired["net"]["id"]}], headers=member()))["server"]["id"]
    server = await cloud.wait_status(sid, "ACTIVE", headers=member())
    fixed = server["addresses"]["private"][0]["addr"]
    await cloud.action(sid, {"addFloatingIp": {"address": fip["ip"]}}, headers=member())
    shown = (await _call(cloud, "GET", f"/v2.1/os-floating-ips/{fip['id']}", 200))["floating_ip"]
    assert (shown["instance_id"], shown["fixed_ip"]) == (sid, fixed)

    # Another project sees none of them.
    assert (await _call(cloud, "GET", "/v2.1/os-floating-ips", 200, headers=OTHER))["floating_ips"] == []
    await _call(cloud, "GET", f"/v2.1/os-floating-ips/{fip['id']}", 404, headers=OTHER)
    await _call(cloud, "DELETE", f"/v2.1/os-floating-ips/{fip['id']}", 404, headers=OTHER)
    await _call(cloud, "DELETE", f"/v2.1/os-floating-ips/{fip['id']}", 403, headers=READER)

    # Deallocating an associated floating IP disassociates it too.
    await _call(cloud, "DELETE", f"/v2.1/os-floating-ips/{fip['id']}", 202)
    await _call(cloud, "GET", f"/v2.1/os-floating-ips/{fip['id']}", 404)
    await _call(cloud, "DELETE", f"/v2.1/os-floating-ips/{by_id['id']}", 202)
    assert (await _call(cloud, "GET", "/v2.1/os-floating-ips", 200))["floating_ips"] == []


async def test_limits_show_novas_network_limits_before_2_36(cloud):
    """As Nova with Neutron: its own quota limits for the proxied resources, and nothing used."""
    absolute = (await _call(cloud, "GET", "/v2.1/limits", 200))["limits"]["absolute"]
    assert {"maxSecurityGroups", "maxSecurityGroupRules", "maxTotalFloatingIps"} <= set(absolute)
    assert absolute["totalSecurityGroupsUsed"] == absolute["totalFloatingIpsUsed"] == 0
    newer = (await _call(cloud, "GET", "/v2.1/limits", 200, headers={**member(), **V236}))["limits"]["absolute"]
    assert not {"maxSecurityGroups", "maxTotalFloatingIps", "totalFloatingIpsUsed"} & set(newer)
