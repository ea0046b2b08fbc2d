"""The Networking API over HTTP: resources, shapes, filters, pagination, sorting, quotas."""

from __future__ import annotations

import ipaddress
import re

from tests.network.conftest import ADMIN, OTHER, PROJECT, member

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def test_versions_resources_extensions(client):
    r = await client.get("/")
    assert r.status_code == 200
    (version,) = r.json()["versions"]
    assert version["id"] == "v2.0" and version["status"] == "CURRENT"
    assert version["links"][0]["href"].endswith("/v2.0/")
    r = await client.get("/v2.0")
    collections = {res["collection"] for res in r.json()["resources"]}
    assert {"networks", "subnets", "ports", "security_groups", "security_group_rules"} <= collections
    r = await client.get("/v2.0/extensions")
    aliases = {e["alias"] for e in r.json()["extensions"]}
    assert {"binding", "security-group", "quotas", "port-security", "standard-attr-description",
            "external-net", "pagination", "sorting"} <= aliases
    r = await client.get("/v2.0/extensions/binding")
    assert r.json()["extension"]["alias"] == "binding"
    r = await client.get("/v2.0/extensions/nope")
    assert r.status_code == 404 and "NeutronError" in r.json()
    r = await client.get("/v2.0/networks.json")
    assert r.status_code == 200 and r.json() == {"networks": []}


async def test_network_lifecycle_and_shape(client, h):
    net = await h.network("private", description="d", mtu=1450)
    for key in ("id", "name", "status", "subnets", "shared", "router:external", "mtu", "admin_state_up",
                "port_security_enabled", "project_id", "tenant_id", "tags", "revision_number",
                "created_at", "updated_at", "description"):
        assert key in net, key
    assert net["status"] == "ACTIVE" and net["mtu"] == 1450 and net["tags"] == []
    assert net["project_id"] == net["tenant_id"]
    assert ISO_Z.match(net["created_at"]) and ISO_Z.match(net["updated_at"])
    assert net["revision_number"] == 0

    r = await client.put(f"/v2.0/networks/{net['id']}", json={"network": {"name": "renamed"}})
    assert r.status_code == 200
    assert r.json()["network"]["name"] == "renamed" and r.json()["network"]["revision_number"] == 1

    r = await client.get(f"/v2.0/networks/{net['id']}", params={"fields": ["id", "name"]})
    assert r.json() == {"network": {"id": net["id"], "name": "renamed"}}

    r = await client.delete(f"/v2.0/networks/{net['id']}")
    assert r.status_code == 204 and r.content == b""
    r = await client.get(f"/v2.0/networks/{net['id']}")
    assert r.status_code == 404
    assert r.json()["NeutronError"]["type"] == "NetworkNotFound"
    assert r.json()["NeutronError"]["detail"] == ""


async def test_subnet_defaults_ipv4_and_ipv6(h, client):
    net = await h.network()
    v4 = await h.subnet(net["id"], "10.1.0.0/24", dns_nameservers=["8.8.8.8"],
                        host_routes=[{"destination": "10.9.0.0/16", "nexthop": "10.1.0.254"}])
    assert v4["gateway_ip"] == "10.1.0.1"
    assert v4["allocation_pools"] == [{"start": "10.1.0.2", "end": "10.1.0.254"}]
    assert v4["enable_dhcp"] is True and v4["dns_nameservers"] == ["8.8.8.8"]
    assert v4["host_routes"] == [{"destination": "10.9.0.0/16", "nexthop": "10.1.0.254"}]

    v6 = await h.subnet(net["id"], "fd00:1::/64")
    assert v6["ip_version"] == 6 and v6["gateway_ip"] == "fd00:1::1"
    assert v6["allocation_pools"] == [{"start": "fd00:1::2", "end": "fd00:1::ffff:ffff:ffff:ffff"}]

    mid = await h.subnet(net["id"], "10.2.0.0/29", gateway_ip="10.2.0.4")
    assert mid["allocation_pools"] == [{"start": "10.2.0.1", "end": "10.2.0.3"},
                                       {"start": "10.2.0.5", "end": "10.2.0.6"}]
    nogw = await h.subnet(net["id"], "10.3.0.0/30", gateway_ip=None)
    assert nogw["gateway_ip"] is None
    assert nogw["allocation_pools"] == [{"start": "10.3.0.1", "end": "10.3.0.2"}]

    r = await client.get(f"/v2.0/networks/{net['id']}")
    assert set(r.json()["network"]["subnets"]) == {v4["id"], v6["id"], mid["id"], nogw["id"]}

    # a port gets one IPv4 address and one IPv6 address by default
    port = await h.port(net["id"])
    versions = sorted(":" in ip["ip_address"] for ip in port["fixed_ips"])
    assert versions == [False, True]

    slaac = await h.subnet(net["id"], "fd00:2::/64", ipv6_address_mode="slaac", ipv6_ra_mode="slaac")
    port = await h.port(net["id"], fixed_ips=[{"subnet_id": slaac["id"]}])
    mac = port["mac_address"].split(":")
    (ip,) = port["fixed_ips"]
    expected = ipaddress.IPv6Address(f"fd00:2::f816:3eff:fe{mac[3]}:{mac[4]}{mac[5]}")
    assert ipaddress.IPv6Address(ip["ip_address"]) == expected  # EUI-64 of the MAC


async def test_port_shape_binding_and_status(h, client, manager):
    net = await h.network()
    sub = await h.subnet(net["id"])
    port = await h.port(net["id"], name="p1", device_id="dev", device_owner="compute:nova")
    assert re.match(r"^fa:16:3e(:[0-9a-f]{2}){3}$", port["mac_address"])
    assert port["status"] == "DOWN" and port["binding:vif_type"] == "unbound"
    assert port["binding:vnic_type"] == "normal" and port["binding:profile"] == {}
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.2"}]
    assert len(port["security_groups"]) == 1
    assert port["admin_state_up"] is True and port["port_security_enabled"] is True

    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"binding:host_id": "host-1"}})
    bound = r.json()["port"]
    assert bound["binding:vif_type"] == "bridge" and bound["binding:host_id"] == "host-1"
    assert bound["revision_number"] == port["revision_number"] + 1

    seen = []

    async def listener(ctx, doc, previous):
        seen.append((doc["id"], previous, doc["status"]))
    manager.ports.add_port_status_listener(listener)
    from nefos.context import admin_context
    doc = await manager.ports.update_port_status(admin_context(), port["id"], "ACTIVE")
    assert doc["status"] == "ACTIVE" and seen == [(port["id"], "DOWN", "ACTIVE")]

    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"binding:host_id": ""}})
    assert r.json()["port"]["binding:vif_type"] == "unbound" and r.json()["port"]["status"] == "DOWN"

    # fixed IPs: ask for a specific address, then replace it
    r = await client.put(f"/v2.0/ports/{port['id']}",
                         json={"port": {"fixed_ips": [{"subnet_id": sub["id"], "ip_address": "10.0.0.50"}]}})
    assert r.json()["port"]["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.50"}]
    other = await h.port(net["id"], fixed_ips=[{"ip_address": "10.0.0.2"}])
    assert other["fixed_ips"][0]["ip_address"] == "10.0.0.2"  # the released address is free again

    # a given MAC must be unique on the network
    r = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"],
                                                         "mac_address": port["mac_address"]}})
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "MacAddressInUse"
    r = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"],
                                                         "fixed_ips": [{"ip_address": "10.0.0.50"}]}})
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "IpAddressInUse"


async def test_in_use_conflicts_and_cascade(h, client):
    net = await h.network()
    sub = await h.subnet(net["id"])
    port = await h.port(net["id"])
    r = await client.delete(f"/v2.0/subnets/{sub['id']}")
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "SubnetInUse"
    r = await client.delete(f"/v2.0/networks/{net['id']}")
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "NetworkInUse"
    sg = port["security_groups"][0]
    r = await client.delete(f"/v2.0/security-groups/{sg}", headers=member(PROJECT))
    assert r.status_code == 404  # not the member's group
    r = await client.delete(f"/v2.0/ports/{port['id']}")
    assert r.status_code == 204
    r = await client.delete(f"/v2.0/ports/{port['id']}")
    assert r.status_code == 404 and r.json()["NeutronError"]["type"] == "PortNotFound"
    r = await client.delete(f"/v2.0/networks/{net['id']}")  # subnets go with the network
    assert r.status_code == 204
    r = await client.get(f"/v2.0/subnets/{sub['id']}")
    assert r.status_code == 404 and r.json()["NeutronError"]["type"] == "SubnetNotFound"


async def test_filters_fields_sorting_pagination(h, client):
    nets = [await h.network(f"n{i}", admin_state_up=(i % 2 == 0)) for i in range(5)]
    r = await client.get("/v2.0/networks", params={"name": ["n1", "n3"]})
    assert sorted(n["name"] for n in r.json()["networks"]) == ["n1", "n3"]
    r = await client.get("/v2.0/networks", params={"admin_state_up": "false"})
    assert sorted(n["name"] for n in r.json()["networks"]) == ["n1", "n3"]
    r = await client.get("/v2.0/networks", params={"admin_state_up": "True", "fields": ["name"]})
    assert sorted(r.json()["networks"], key=lambda n: n["name"]) == [{"name": "n0"}, {"name": "n2"}, {"name": "n4"}]
    r = await client.get("/v2.0/networks", params={"tenant_id": "nobody"})
    assert r.json()["networks"] == []

    r = await client.get("/v2.0/networks", params={"sort_key": "name", "sort_dir": "desc"})
    assert [n["name"] for n in r.json()["networks"]] == ["n4", "n3", "n2", "n1", "n0"]

    r = await client.get("/v2.0/networks", params={"sort_key": "name", "sort_dir": "asc", "limit": 2})
    page = r.json()
    assert [n["name"] for n in page["networks"]] == ["n0", "n1"]
    (nxt,) = page["networks_links"]
    assert nxt["rel"] == "next" and "marker=" in nxt["href"] and "limit=2" in nxt["href"]
    r = await client.get(nxt["href"])
    page2 = r.json()
    assert [n["name"] for n in page2["networks"]] == ["n2", "n3"]
    assert {link["rel"] for link in page2["networks_links"]} == {"next", "previous"}
    prev = next(link for link in page2["networks_links"] if link["rel"] == "previous")
    r = await client.get(prev["href"])
    assert [n["name"] for n in r.json()["networks"]] == ["n0", "n1"]
    nxt = next(link for link in page2["networks_links"] if link["rel"] == "next")
    r = await client.get(nxt["href"])
    page3 = r.json()
    assert [n["name"] for n in page3["networks"]] == ["n4"]
    assert [link["rel"] for link in page3["networks_links"]] == ["previous"]

    r = await client.get("/v2.0/networks", params={"marker": "0" * 36})
    assert r.status_code == 404

    net = nets[0]
    sub = await h.subnet(net["id"])
    p1 = await h.port(net["id"], device_id="vm-1")
    await h.port(net["id"], device_id="vm-2")
    r = await client.get("/v2.0/ports", params={"device_id": "vm-1"})
    assert [p["id"] for p in r.json()["ports"]] == [p1["id"]]
    r = await client.get("/v2.0/ports", params={"fixed_ips": f"ip_address={p1['fixed_ips'][0]['ip_address']}"})
    assert [p["id"] for p in r.json()["ports"]] == [p1["id"]]
    r = await client.get("/v2.0/ports", params={"fixed_ips": f"subnet_id={sub['id']}"})
    assert len(r.json()["ports"]) == 2
    r = await client.get("/v2.0/subnets", params={"network_id": net["id"], "ip_version": "4"})
    assert [s["id"] for s in r.json()["subnets"]] == [sub["id"]]


async def test_project_isolation(h, client):
    a, b = member(PROJECT), member(OTHER)
    own = await h.network("a-net", headers=a)
    assert own["project_id"] == PROJECT
    shared = await h.network("shared-net", shared=True)
    await h.subnet(shared["id"], "10.50.0.0/24")
    r = await client.get("/v2.0/networks", headers=b)
    assert [n["name"] for n in r.json()["networks"]] == ["shared-net"]
    r = await client.get(f"/v2.0/networks/{own['id']}", headers=b)
    assert r.status_code == 404
    r = await client.put(f"/v2.0/networks/{shared['id']}", json={"network": {"name": "x"}}, headers=b)
    assert r.status_code == 403 and r.json()["NeutronError"]["type"] == "PolicyNotAuthorized"
    # B may put a port on the shared network; A (the network's non-owner too) does not see it
    port = await h.port(shared["id"], headers=b)
    assert port["project_id"] == OTHER and "binding:host_id" not in port
    r = await client.get("/v2.0/ports", headers=a)
    assert r.json()["ports"] == []
    r = await client.get("/v2.0/ports", headers=ADMIN)
    assert [p["id"] for p in r.json()["ports"]] == [port["id"]]
    # B cannot create resources for A, nor shared networks
    r = await client.post("/v2.0/networks", json={"network": {"name": "x", "project_id": PROJECT}}, headers=b)
    assert r.status_code == 400
    r = await client.post("/v2.0/networks", json={"network": {"name": "x", "shared": True}}, headers=b)
    assert r.status_code == 403
    # each project has its own default security group
    r = await client.get("/v2.0/security-groups", headers=a)
    (ga,) = r.json()["security_groups"]
    r = await client.get("/v2.0/security-groups", headers=b)
    (gb,) = r.json()["security_groups"]
    assert ga["name"] == gb["name"] == "default" and ga["id"] != gb["id"]
    assert port["security_groups"] == [gb["id"]]


async def test_security_groups_and_rules(h, client):
    a = member(PROJECT)
    r = await client.get("/v2.0/security-groups", headers=a)
    (default,) = r.json()["security_groups"]
    rules = {(x["direction"], x["ethertype"], x["remote_group_id"]) for x in default["security_group_rules"]}
    assert rules == {("egress", "IPv4", None), ("egress", "IPv6", None),
                     ("ingress", "IPv4", default["id"]), ("ingress", "IPv6", default["id"])}
    # listing again creates nothing more
    r = await client.get("/v2.0/security-groups", headers=a)
    assert len(r.json()["security_groups"]) == 1

    web = (await h.post("/v2.0/security-groups", {"security_group": {"name": "web"}}, a))["security_group"]
    assert len(web["security_group_rules"]) == 2 and web["stateful"] is True
    rule = (await h.post("/v2.0/security-group-rules", {"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "protocol": "tcp",
        "port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "0.0.0.0/0"}}, a))["security_group_rule"]
    assert rule["protocol"] == "tcp" and rule["project_id"] == PROJECT
    r = await client.post("/v2.0/security-group-rules", headers=a, json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "protocol": "tcp",
        "port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "0.0.0.0/0"}})
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "SecurityGroupRuleExists"
    r = await client.post("/v2.0/security-groups", json={"security_group": {"name": "default"}}, headers=a)
    assert r.status_code == 409
    r = await client.delete(f"/v2.0/security-groups/{default['id']}", headers=a)
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "SecurityGroupCannotRemoveDefault"

    net = await h.network(headers=a)
    await h.subnet(net["id"], headers=a)
    port = await h.port(net["id"], headers=a, security_groups=[web["id"]])
    assert port["security_groups"] == [web["id"]]
    r = await client.delete(f"/v2.0/security-groups/{web['id']}", headers=a)
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "SecurityGroupInUse"
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"security_groups": []}}, headers=a)
    assert r.json()["port"]["security_groups"] == []
    r = await client.delete(f"/v2.0/security-group-rules/{rule['id']}", headers=a)
    assert r.status_code == 204
    r = await client.delete(f"/v2.0/security-groups/{web['id']}", headers=a)
    assert r.status_code == 204
    r = await client.get(f"/v2.0/security-group-rules/{rule['id']}", headers=a)
    assert r.status_code == 404 and r.json()["NeutronError"]["type"] == "SecurityGroupRuleNotFound"


async def test_bulk_create_is_all_or_nothing(client):
    r = await client.post("/v2.0/networks", json={"networks": [{"name": "b1"}, {"name": "b2"}]})
    assert r.status_code == 201 and [n["name"] for n in r.json()["networks"]] == ["b1", "b2"]
    r = await client.post("/v2.0/networks", json={"networks": [{"name": "b3"}, {"name": 5}]})
    assert r.status_code == 400
    r = await client.get("/v2.0/networks", params={"name": "b3"})
    assert r.json()["networks"] == []


async def test_quotas(h, client):
    a = member(PROJECT)
    r = await client.get(f"/v2.0/quotas/{PROJECT}", headers=a)
    assert r.json()["quota"] == {"network": 100, "subnet": 100, "port": 500, "security_group": 10,
                                 "security_group_rule": 100, "router": 10, "floatingip": 50}
    r = await client.put(f"/v2.0/quotas/{PROJECT}", json={"quota": {"network": 1}}, headers=a)
    assert r.status_code == 403
    r = await client.get(f"/v2.0/quotas/{OTHER}", headers=a)
    assert r.status_code == 403
    r = await client.put(f"/v2.0/quotas/{PROJECT}", json={"quota": {"network": 1, "port": 2}})
    assert r.status_code == 200 and r.json()["quota"]["network"] == 1
    r = await client.get("/v2.0/quotas")
    assert [q["project_id"] for q in r.json()["quotas"]] == [PROJECT]

    net = await h.network(headers=a)
    r = await client.post("/v2.0/networks", json={"network": {"name": "two"}}, headers=a)
    assert r.status_code == 409
    assert r.json()["NeutronError"] == {"type": "OverQuota", "detail": "",
                                        "message": "Quota exceeded for resources: ['network']."}
    await h.subnet(net["id"], headers=a)
    await h.port(net["id"], headers=a)
    await h.port(net["id"], headers=a)
    r = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"]}}, headers=a)
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "OverQuota"
    r = await client.get(f"/v2.0/quotas/{PROJECT}/details", headers=a)
    details = r.json()["quota"]
    assert details["port"] == {"limit": 2, "used": 2, "reserved": 0}
    assert details["network"]["used"] == 1 and details["subnet"]["used"] == 1
    assert details["security_group"]["used"] == 1 and details["security_group_rule"]["used"] == 4

    r = await client.delete(f"/v2.0/quotas/{PROJECT}")
    assert r.status_code == 204
    r = await client.get(f"/v2.0/quotas/{PROJECT}", headers=a)
    assert r.json()["quota"]["network"] == 100
    r = await client.get(f"/v2.0/quotas/{PROJECT}/default", headers=a)
    assert r.json()["quota"]["port"] == 500

    # deleting gives usage back
    ports = (await client.get("/v2.0/ports", headers=a)).json()["ports"]
    for p in ports:
        await client.delete(f"/v2.0/ports/{p['id']}", headers=a)
    await client.delete(f"/v2.0/networks/{net['id']}", headers=a)
    details = (await client.get(f"/v2.0/quotas/{PROJECT}/details", headers=a)).json()["quota"]
    assert (details["port"]["used"], details["network"]["used"], details["subnet"]["used"]) == (0, 0, 0)


async def test_a_members_pages_are_full_however_many_rows_of_other_projects_sort_between(h, client):
    """The project scope is part of the paged statement: another project's networks, ports and
    security groups that sort between a member's own never shorten the member's pages, forwards
    or reversed."""
    mine = member(PROJECT)
    for i in range(5):
        theirs = await h.network(f"net-{i}-b", headers=member(OTHER))
        await h.port(theirs["id"], headers=member(OTHER), name=f"port-{i}-b")
        await h.post("/v2.0/security-groups", {"security_group": {"name": f"sg-{i}-b"}}, member(OTHER))
        own = await h.network(f"net-{i}-a", headers=mine)
        await h.port(own["id"], headers=mine, name=f"port-{i}-a")
        await h.post("/v2.0/security-groups", {"security_group": {"name": f"sg-{i}-a"}}, mine)

    async def walk(collection: str, prefix: str, **params) -> list[str]:
        seen, url = [], f"/v2.0/{collection}"
        query = {"sort_key": "name", "sort_dir": "asc", "limit": 2, **params}
        while url:
            r = await client.get(url, params=query, headers=mine)
            assert r.status_code == 200, r.text
            doc = r.json()
            names = [d["name"] for d in doc[collection.replace("-", "_")] if d["name"].startswith(prefix)]
            assert len(names) == 2 or not any(link["rel"] == "next" for link in doc.get(
                f"{collection.replace('-', '_')}_links", [])), names
            seen += names
            url = next((link["href"] for link in doc.get(f"{collection.replace('-', '_')}_links", [])
                        if link["rel"] == "next"), None)
            query = None
        return seen

    assert await walk("networks", "net-") == [f"net-{i}-a" for i in range(5)]
    assert await walk("ports", "port-") == [f"port-{i}-a" for i in range(5)]
    assert await walk("security-groups", "sg-", name=[f"sg-{i}-{p}" for i in range(5) for p in "ab"]) == [
        f"sg-{i}-a" for i in range(5)]
