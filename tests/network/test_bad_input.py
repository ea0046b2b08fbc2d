"""Malformed and invalid requests get Neutron's 4xx answer and error type, never a 500."""

from __future__ import annotations

import pytest

from tests.network.conftest import member

UNKNOWN = "3f0a8f3c-1e4a-4f8e-9d0b-5b7b0f6f2a11"

# (name, method, path template, body (raw bytes or JSON), headers, status, NeutronError type, text in message)
CASES = [
    ("empty body", "POST", "/v2.0/networks", b"", None, 400, "HTTPBadRequest", "body required"),
    ("not json", "POST", "/v2.0/networks", b"{nope", None, 400, "HTTPBadRequest", "JSON"),
    ("body not object", "POST", "/v2.0/networks", [1, 2], None, 400, "HTTPBadRequest", ""),
    ("missing resource key", "POST", "/v2.0/networks", {"net": {}}, None, 400, "HTTPBadRequest",
     "Unable to find 'network'"),
    ("resource not object", "POST", "/v2.0/networks", {"network": "x"}, None, 400, "HTTPBadRequest", ""),
    ("unknown attribute", "POST", "/v2.0/networks", {"network": {"colour": "red"}}, None, 400,
     "HTTPBadRequest", "Unrecognized attribute(s) 'colour'"),
    ("name not string", "POST", "/v2.0/networks", {"network": {"name": 5}}, None, 400, "HTTPBadRequest",
     "Invalid input for name"),
    ("name too long", "POST", "/v2.0/networks", {"network": {"name": "x" * 256}}, None, 400,
     "HTTPBadRequest", "exceeds maximum length"),
    ("admin_state_up not bool", "POST", "/v2.0/networks", {"network": {"admin_state_up": "maybe"}}, None,
     400, "HTTPBadRequest", "Invalid input for admin_state_up"),
    ("mtu too small", "POST", "/v2.0/networks", {"network": {"mtu": 10}}, None, 400, "HTTPBadRequest",
     "Invalid input for mtu"),
    ("read-only status", "POST", "/v2.0/networks", {"network": {"status": "DOWN"}}, None, 400,
     "HTTPBadRequest", "not allowed in POST"),
    ("member sets shared", "POST", "/v2.0/networks", {"network": {"shared": True}}, "member", 403,
     "PolicyNotAuthorized", ""),
    ("update read-only id", "PUT", "/v2.0/networks/{net}", {"network": {"id": "x"}}, None, 400,
     "HTTPBadRequest", "read-only attribute id"),
    ("update unknown network", "PUT", f"/v2.0/networks/{UNKNOWN}", {"network": {"name": "x"}}, None, 404,
     "NetworkNotFound", UNKNOWN),
    ("subnet without cidr", "POST", "/v2.0/subnets", {"subnet": {"network_id": "{net}", "ip_version": 4}},
     None, 400, "HTTPBadRequest", "Required attribute 'cidr' not specified"),
    ("subnet bad cidr", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.0.0.300/24"}}, None, 400,
     "HTTPBadRequest", "Invalid input for cidr"),
    ("subnet cidr host bits", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.0.0.5/24"}}, None, 400,
     "HTTPBadRequest", "10.0.0.0/24"),
    ("subnet ip_version 5", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 5, "cidr": "10.0.0.0/24"}}, None, 400,
     "HTTPBadRequest", "Invalid input for ip_version"),
    ("subnet version mismatch", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 6, "cidr": "10.0.0.0/24"}}, None, 400,
     "InvalidInput", ""),
    ("subnet network id not uuid", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "abc", "ip_version": 4, "cidr": "10.0.0.0/24"}}, None, 400,
     "HTTPBadRequest", "Invalid input for network_id"),
    ("subnet unknown network", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": UNKNOWN, "ip_version": 4, "cidr": "10.0.0.0/24"}}, None, 404,
     "NetworkNotFound", ""),
    ("subnet overlapping", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.10.0.0/16"}}, None, 400,
     "InvalidInput", "overlaps"),
    ("subnet gateway outside", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.20.0.0/24", "gateway_ip": "10.99.0.1"}},
     None, 400, "InvalidInput", "Gateway"),
    ("subnet pool outside cidr", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.21.0.0/24",
                 "allocation_pools": [{"start": "10.21.0.10", "end": "10.22.0.5"}]}}, None, 400,
     "OutOfBoundsAllocationPool", ""),
    ("subnet pool over gateway", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.22.0.0/24",
                 "allocation_pools": [{"start": "10.22.0.1", "end": "10.22.0.9"}]}}, None, 409,
     "GatewayConflictWithAllocationPools", ""),
    ("subnet pools overlap", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.23.0.0/24",
                 "allocation_pools": [{"start": "10.23.0.10", "end": "10.23.0.20"},
                                      {"start": "10.23.0.15", "end": "10.23.0.30"}]}}, None, 409,
     "OverlappingAllocationPools", ""),
    ("subnet bad nameserver", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.24.0.0/24", "dns_nameservers": ["dns"]}},
     None, 400, "HTTPBadRequest", "Invalid input for dns_nameservers"),
    ("subnet bad host route", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 4, "cidr": "10.25.0.0/24",
                 "host_routes": [{"destination": "10.0.0.0/8"}]}}, None, 400, "HTTPBadRequest",
     "Invalid input for host_routes"),
    ("subnet slaac on /80", "POST", "/v2.0/subnets",
     {"subnet": {"network_id": "{net}", "ip_version": 6, "cidr": "fd00::/80", "ipv6_address_mode": "slaac"}},
     None, 400, "InvalidInput", "/64"),
    ("port without network", "POST", "/v2.0/ports", {"port": {"name": "p"}}, None, 400, "HTTPBadRequest",
     "Required attribute 'network_id'"),
    ("port unknown network", "POST", "/v2.0/ports", {"port": {"network_id": UNKNOWN}}, None, 404,
     "NetworkNotFound", ""),
    ("port bad mac", "POST", "/v2.0/ports", {"port": {"network_id": "{net}", "mac_address": "zz:16:3e:00:00:01"}},
     None, 400, "HTTPBadRequest", "Invalid input for mac_address"),
    ("port fixed_ips not list", "POST", "/v2.0/ports", {"port": {"network_id": "{net}", "fixed_ips": "10.0.0.5"}},
     None, 400, "HTTPBadRequest", "Invalid input for fixed_ips"),
    ("port bad fixed ip", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "fixed_ips": [{"ip_address": "10.0.0.999"}]}}, None, 400,
     "HTTPBadRequest", "Invalid input for fixed_ips"),
    ("port ip off network", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "fixed_ips": [{"ip_address": "192.168.9.9"}]}}, None, 400,
     "InvalidIpForNetwork", "192.168.9.9"),
    ("port ip off subnet", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "fixed_ips": [{"subnet_id": "{sub}", "ip_address": "192.168.9.9"}]}},
     None, 400, "InvalidIpForSubnet", ""),
    ("port unknown subnet", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "fixed_ips": [{"subnet_id": UNKNOWN}]}}, None, 404, "SubnetNotFound", ""),
    ("port broadcast address", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "fixed_ips": [{"ip_address": "10.10.0.255"}]}}, None, 400,
     "InvalidIpForNetwork", ""),
    ("port bad vnic type", "POST", "/v2.0/ports", {"port": {"network_id": "{net}", "binding:vnic_type": "warp"}},
     None, 400, "HTTPBadRequest", "Invalid input for binding:vnic_type"),
    ("member binds host", "POST", "/v2.0/ports", {"port": {"network_id": "{net}", "binding:host_id": "h1"}},
     "member", 403, "PolicyNotAuthorized", ""),
    ("port unknown security group", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "security_groups": [UNKNOWN]}}, None, 404, "SecurityGroupNotFound", ""),
    ("port groups without port security", "POST", "/v2.0/ports",
     {"port": {"network_id": "{net}", "port_security_enabled": False, "security_groups": ["{sg}"]}}, None, 400,
     "PortSecurityAndIPRequiredForSecurityGroups", ""),
    ("port update network_id", "PUT", "/v2.0/ports/{port}", {"port": {"network_id": UNKNOWN}}, None, 400,
     "HTTPBadRequest", "read-only attribute network_id"),
    ("port unknown", "GET", f"/v2.0/ports/{UNKNOWN}", None, None, 404, "PortNotFound", UNKNOWN),
    ("rule bad direction", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "sideways"}}, None, 400,
     "HTTPBadRequest", "Invalid input for direction"),
    ("rule bad protocol", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "ingress", "protocol": "xyz"}}, None, 400,
     "SecurityGroupRuleInvalidProtocol", ""),
    ("rule ports without protocol", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "ingress", "port_range_min": 22}},
     None, 400, "SecurityGroupProtocolRequiredWithPorts", ""),
    ("rule port range reversed", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "ingress", "protocol": "tcp",
                              "port_range_min": 90, "port_range_max": 80}}, None, 400,
     "SecurityGroupInvalidPortRange", ""),
    ("rule prefix vs ethertype", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "ingress", "ethertype": "IPv6",
                              "remote_ip_prefix": "10.0.0.0/8"}}, None, 400,
     "SecurityGroupRuleParameterConflict", ""),
    ("rule prefix and group", "POST", "/v2.0/security-group-rules",
     {"security_group_rule": {"security_group_id": "{sg}", "direction": "ingress",
                              "remote_ip_prefix": "10.0.0.0/8", "remote_group_id": "{sg}"}}, None, 400,
     "SecurityGroupRemoteGroupAndRemoteIpPrefix", ""),
    ("bad filter", "GET", "/v2.0/networks?colour=red", None, None, 400, "HTTPBadRequest",
     "invalid attribute for filtering"),
    ("bad bool filter", "GET", "/v2.0/networks?shared=perhaps", None, None, 400, "HTTPBadRequest", ""),
    ("bad sort key", "GET", "/v2.0/networks?sort_key=colour", None, None, 400, "HTTPBadRequest", "sort_key"),
    ("bad sort dir", "GET", "/v2.0/networks?sort_key=name&sort_dir=up", None, None, 400, "HTTPBadRequest", ""),
    ("bad limit", "GET", "/v2.0/networks?limit=-3", None, None, 400, "HTTPBadRequest", "Limit"),
    ("quota bad value", "PUT", "/v2.0/quotas/p1", {"quota": {"network": -5}}, None, 400, "HTTPBadRequest",
     "Invalid input for network"),
    ("quota unknown resource", "PUT", "/v2.0/quotas/p1", {"quota": {"gpus": 5}}, None, 400, "HTTPBadRequest",
     "Unrecognized"),
    ("unknown collection", "GET", "/v2.0/routers-of-doom", None, None, 404, "HTTPNotFound", ""),
    ("method not allowed", "DELETE", "/v2.0/networks", None, None, 405, "HTTPMethodNotAllowed", ""),
    ("is_default not bool", "POST", "/v2.0/networks", {"network": {"router:external": True, "is_default": "x"}},
     None, 400, "HTTPBadRequest", "Invalid input for is_default"),
    ("member sets is_default", "PUT", "/v2.0/networks/{net}", {"network": {"is_default": True}}, "member", 403,
     "PolicyNotAuthorized", ""),
    ("topology unknown field", "GET", "/v2.0/auto-allocated-topology/p1?fields=name", None, None, 400,
     "BadRequest", "Bad auto_allocate request: Unrecognized field."),
    ("topology of another project", "GET", "/v2.0/auto-allocated-topology/someone-else", None, "member", 403,
     "NotAuthorized", "Not authorized."),
    ("topology delete of another project", "DELETE", "/v2.0/auto-allocated-topology/someone-else", None,
     "member", 403, "NotAuthorized", "Not authorized."),
    ("topology without a default external network", "GET", "/v2.0/auto-allocated-topology/p1", None, None, 409,
     "AutoAllocationFailure", "No default router:external network"),
]


@pytest.fixture
async def world(h):
    net = await h.network("target")
    sub = await h.subnet(net["id"], "10.10.0.0/24")
    port = await h.port(net["id"])
    return {"net": net["id"], "sub": sub["id"], "port": port["id"], "sg": port["security_groups"][0]}


def _fill(value, world):
    if isinstance(value, str):
        for key, ident in world.items():
            value = value.replace("{" + key + "}", ident)
        return value
    if isinstance(value, list):
        return [_fill(v, world) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, world) for k, v in value.items()}
    return value


@pytest.mark.parametrize("name,method,path,body,who,status,kind,text", CASES, ids=[c[0] for c in CASES])
async def test_bad_request(client, world, name, method, path, body, who, status, kind, text):
    headers = member() if who == "member" else {}
    kwargs: dict = {"headers": headers}
    if isinstance(body, bytes):
        kwargs["content"] = body
        headers["content-type"] = "application/json"
    elif body is not None:
        kwargs["json"] = _fill(body, world)
    r = await client.request(method, _fill(path, world), **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["NeutronError"]
    assert error["type"] == kind, r.text
    assert text in error["message"], r.text
    assert error["detail"] == ""


def test_table_is_large_enough():
    assert len(CASES) >= 15
    assert {c[2].split("/")[2].split("?")[0] for c in CASES} >= {"networks", "subnets", "ports"}


async def test_ports_are_neither_sorted_nor_filtered_by_their_provisioning_blocks(client, h):
    """The blocks are a mapping: ports with different ones cannot be ordered by them (a 500 before)."""
    net = await h.network("blocks")
    bound = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"], "binding:host_id": "h1"}})
    assert bound.status_code == 201, bound.text
    await h.port(net["id"])
    listed = (await client.get("/v2.0/ports", params={"network_id": net["id"]})).json()["ports"]
    assert {len(p["nefos:provisioning"]) > 0 for p in listed} == {True, False}
    for query in ({"sort_key": "nefos:provisioning"}, {"nefos:provisioning": "L2"}):
        r = await client.get("/v2.0/ports", params=query)
        assert r.status_code == 400, r.text
        assert "nefos:provisioning is invalid" in r.text or "[nefos:provisioning] is invalid" in r.text
