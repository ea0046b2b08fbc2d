"""Routers through the Networking API: Neutron's shapes, status codes and errors, project isolation
and the router quota."""

from __future__ import annotations

import pytest

from tests.network.conftest import OTHER, Helpers, member
from tests.network.l3_helpers import external_network, put, router, tenant_network
from tests.noauth import ADMIN


@pytest.fixture
def h(client):
    return Helpers(client)


async def test_router_shape_and_gateway(h, client):
    ext, ext_sub = await external_network(h)
    r = await router(h, external_gateway_info={"network_id": ext["id"]})
    assert set(r) >= {"id", "name", "admin_state_up", "external_gateway_info", "routes", "status",
                      "project_id", "tenant_id"}
    assert r["status"] == "ACTIVE" and r["routes"] == [] and r["admin_state_up"] is True
    info = r["external_gateway_info"]
    assert info["network_id"] == ext["id"] and info["enable_snat"] is True
    [fixed] = info["external_fixed_ips"]
    assert fixed["subnet_id"] == ext_sub["id"] and fixed["ip_address"] == "172.24.4.10"
    # the gateway port belongs to no project: the member does not see it
    ports = (await client.get("/v2.0/ports", headers=member())).json()["ports"]
    assert ports == []
    gw = (await client.get(f"/v2.0/ports?device_id={r['id']}")).json()["ports"]
    assert [p["device_owner"] for p in gw] == ["network:router_gateway"]
    cleared = (await put(h, f"/v2.0/routers/{r['id']}", {"router": {"external_gateway_info": {}}},
                         member()))["router"]
    assert cleared["external_gateway_info"] is None
    assert (await client.get(f"/v2.0/ports?device_id={r['id']}")).json()["ports"] == []


async def test_gateway_attributes_of_the_admin_and_non_external_networks(h):
    ext, _ = await external_network(h)
    net, _ = await tenant_network(h)
    r = await h.post("/v2.0/routers", {"router": {"external_gateway_info": {
        "network_id": ext["id"], "enable_snat": False}}}, member(), expect=403)
    assert r["NeutronError"]["type"] == "PolicyNotAuthorized"
    r = await h.post("/v2.0/routers", {"router": {"external_gateway_info": {"network_id": net["id"]}}},
                     member(), expect=400)
    assert r["NeutronError"]["message"] == f"Bad router request: Network {net['id']} is not a valid external network."
    ok = await router(h, ADMIN, external_gateway_info={"network_id": ext["id"], "enable_snat": False})
    assert ok["external_gateway_info"]["enable_snat"] is False


async def test_interfaces(h, client):
    net, sub = await tenant_network(h)
    r = await router(h)
    info = await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    assert info["id"] == r["id"] and info["subnet_id"] == sub["id"] and info["subnet_ids"] == [sub["id"]]
    assert info["network_id"] == net["id"] and info["tenant_id"] == r["project_id"]
    port = (await client.get(f"/v2.0/ports/{info['port_id']}", headers=member())).json()["port"]
    assert port["device_owner"] == "network:router_interface" and port["device_id"] == r["id"]
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": sub["gateway_ip"]}]
    # the same subnet again, an overlapping one: 400
    again = await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member(), 400)
    assert again["NeutronError"]["type"] == "BadRequest"
    assert f"Router already has a port on subnet {sub['id']}" in again["NeutronError"]["message"]
    _, overlapping = await tenant_network(h, "10.0.0.0/25")
    over = await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": overlapping["id"]},
                     member(), 400)
    assert "overlaps with cidr 10.0.0.0/24" in over["NeutronError"]["message"]
    both = await put(h, f"/v2.0/routers/{r['id']}/add_router_interface",
                     {"subnet_id": sub["id"], "port_id": port["id"]}, member(), 400)
    assert both["NeutronError"]["type"] == "BadRequest"
    # the router's port is not deleted through the port API; the router is not deleted with it
    gone = await client.delete(f"/v2.0/ports/{port['id']}", headers=member())
    assert gone.status_code == 409 and gone.json()["NeutronError"]["type"] == "ServicePortInUse"
    busy = await client.delete(f"/v2.0/routers/{r['id']}", headers=member())
    assert busy.status_code == 409 and busy.json()["NeutronError"]["type"] == "RouterInUse"
    assert (await client.delete(f"/v2.0/subnets/{sub['id']}", headers=member())).status_code == 409
    # unknown: 404
    missing = await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface",
                        {"subnet_id": overlapping["id"]}, member(), 404)
    assert missing["NeutronError"]["type"] == "RouterInterfaceNotFoundForSubnet"
    removed = await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface", {"subnet_id": sub["id"]}, member())
    assert removed["port_id"] == port["id"]
    assert (await client.get(f"/v2.0/ports/{port['id']}", headers=member())).status_code == 404
    assert (await client.delete(f"/v2.0/routers/{r['id']}", headers=member())).status_code == 204
    assert (await client.get(f"/v2.0/routers/{r['id']}", headers=member())).status_code == 404


async def test_interface_by_port(h, client):
    net, sub = await tenant_network(h)
    port = await h.port(net["id"], headers=member())
    r = await router(h)
    info = await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"port_id": port["id"]}, member())
    assert info["port_id"] == port["id"] and info["subnet_ids"] == [sub["id"]]
    other = await router(h)
    used = await put(h, f"/v2.0/routers/{other['id']}/add_router_interface", {"port_id": port["id"]}, member(), 409)
    assert used["NeutronError"]["type"] == "PortInUse"
    missing = await put(h, f"/v2.0/routers/{other['id']}/remove_router_interface", {"port_id": port["id"]},
                        member(), 404)
    assert missing["NeutronError"]["type"] == "RouterInterfaceNotFound"
    await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface", {"port_id": port["id"]}, member())


async def test_routes(h):
    _, sub = await tenant_network(h)
    r = await router(h)
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    routes = [{"destination": "192.168.7.0/24", "nexthop": "10.0.0.20"}]
    doc = (await put(h, f"/v2.0/routers/{r['id']}", {"router": {"routes": routes}}, member()))["router"]
    assert doc["routes"] == routes
    bad = await put(h, f"/v2.0/routers/{r['id']}", {"router": {"routes": [
        {"destination": "192.168.7.0/24", "nexthop": "10.9.9.9"}]}}, member(), 400)
    assert bad["NeutronError"]["type"] == "InvalidRoutes"


async def test_another_projects_router_is_not_found(h, client):
    _, sub = await tenant_network(h)
    r = await router(h)
    them = member(OTHER)
    for method, path, body in (("GET", f"/v2.0/routers/{r['id']}", None),
                               ("PUT", f"/v2.0/routers/{r['id']}", {"router": {"name": "x"}}),
                               ("DELETE", f"/v2.0/routers/{r['id']}", None),
                               ("PUT", f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]})):
        resp = await client.request(method, path, json=body, headers=them)
        assert resp.status_code == 404, (method, path, resp.text)
        assert resp.json()["NeutronError"]["type"] == "RouterNotFound"
    assert (await client.get("/v2.0/routers", headers=them)).json()["routers"] == []
    # nor may a project put its router on another project's subnet
    mine = await router(h, them)
    resp = await put(h, f"/v2.0/routers/{mine['id']}/add_router_interface", {"subnet_id": sub["id"]}, them, 404)
    assert resp["NeutronError"]["type"] == "SubnetNotFound"


async def test_router_quota(h, client):
    await put(h, f"/v2.0/quotas/{'p' * 32}", {"quota": {"router": 2}})
    await router(h)
    await router(h)
    r = await h.post("/v2.0/routers", {"router": {"name": "third"}}, member(), expect=409)
    assert r["NeutronError"]["type"] == "OverQuota"
    default = (await client.get(f"/v2.0/quotas/{'p' * 32}/default")).json()["quota"]
    assert default["router"] == 10 and default["floatingip"] == 50


async def test_extensions_listed(client):
    aliases = {e["alias"] for e in (await client.get("/v2.0/extensions")).json()["extensions"]}
    assert {"router", "ext-gw-mode", "extraroute", "external-net"} <= aliases
