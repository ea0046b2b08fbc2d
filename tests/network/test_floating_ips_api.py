"""Floating IPs through the Networking API: create on an external network, associate through a
router, disassociate; Neutron's errors, project isolation and the floatingip quota."""

from __future__ import annotations

import pytest

from tests.network.conftest import OTHER, PROJECT, Helpers, member
from tests.network.l3_helpers import external_network, put, router, tenant_network
from tests.noauth import ADMIN


@pytest.fixture
def h(client):
    return Helpers(client)


async def _wired(h):
    """An external network, a tenant subnet, a router between them and a guest port."""
    ext, _ = await external_network(h)
    net, sub = await tenant_network(h)
    r = await router(h, external_gateway_info={"network_id": ext["id"]})
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    port = await h.port(net["id"], headers=member())
    return ext, sub, r, port


async def _fip(h, body: dict, headers=None, expect=201) -> dict:
    return await h.post("/v2.0/floatingips", {"floatingip": body}, headers or member(), expect=expect)


async def test_create_associate_disassociate(h, client):
    ext, sub, r, port = await _wired(h)
    fip = (await _fip(h, {"floating_network_id": ext["id"]}))["floatingip"]
    assert fip["floating_network_id"] == ext["id"] and fip["floating_ip_address"].startswith("172.24.4.")
    assert fip["port_id"] is None and fip["fixed_ip_address"] is None and fip["router_id"] is None
    assert fip["status"] == "DOWN" and fip["project_id"] == PROJECT
    fixed = port["fixed_ips"][0]["ip_address"]
    doc = (await put(h, f"/v2.0/floatingips/{fip['id']}", {"floatingip": {"port_id": port["id"]}},
                     member()))["floatingip"]
    assert (doc["port_id"], doc["fixed_ip_address"], doc["router_id"]) == (port["id"], fixed, r["id"])
    # associated through the router: its interface may not go, nor its gateway
    used = await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface", {"subnet_id": sub["id"]}, member(), 409)
    assert used["NeutronError"]["type"] == "RouterInterfaceInUseByFloatingIP"
    used = await put(h, f"/v2.0/routers/{r['id']}", {"router": {"external_gateway_info": None}}, member(), 409)
    assert used["NeutronError"]["type"] == "RouterExternalGatewayInUseByFloatingIp"
    # one floating IP per fixed address and external network
    again = await _fip(h, {"floating_network_id": ext["id"], "port_id": port["id"]}, expect=409)
    assert again["NeutronError"]["type"] == "FloatingIPPortAlreadyAssociated"
    doc = (await put(h, f"/v2.0/floatingips/{fip['id']}", {"floatingip": {"port_id": None}}, member()))["floatingip"]
    assert doc["port_id"] is None and doc["router_id"] is None and doc["status"] == "DOWN"
    await put(h, f"/v2.0/routers/{r['id']}/remove_router_interface", {"subnet_id": sub["id"]}, member())
    assert (await client.delete(f"/v2.0/floatingips/{fip['id']}", headers=member())).status_code == 204
    assert (await client.get(f"/v2.0/floatingips/{fip['id']}", headers=member())).status_code == 404


async def test_create_associated_and_deleting_the_port_disassociates(h, client):
    ext, _, r, port = await _wired(h)
    fip = (await _fip(h, {"floating_network_id": ext["id"], "port_id": port["id"]}))["floatingip"]
    assert fip["router_id"] == r["id"] and fip["status"] == "ACTIVE"
    assert (await client.delete(f"/v2.0/ports/{port['id']}", headers=member())).status_code == 204
    after = (await client.get(f"/v2.0/floatingips/{fip['id']}", headers=member())).json()["floatingip"]
    assert after["port_id"] is None and after["router_id"] is None


async def test_no_router_to_the_external_network(h):
    ext, _ = await external_network(h)
    net, sub = await tenant_network(h)
    port = await h.port(net["id"], headers=member())
    r = await _fip(h, {"floating_network_id": ext["id"], "port_id": port["id"]}, expect=404)
    assert r["NeutronError"]["type"] == "ExternalGatewayForFloatingIPNotFound"
    assert r["NeutronError"]["message"] == (
        f"External network {ext['id']} is not reachable from subnet {sub['id']}.  Therefore, cannot "
        f"associate Port {port['id']} with a Floating IP.")


async def test_bad_requests(h):
    ext, _, _, port = await _wired(h)
    net, _ = await tenant_network(h, "10.5.0.0/24")
    r = await _fip(h, {"floating_network_id": net["id"]}, expect=400)
    assert r["NeutronError"]["message"] == f"Bad floatingip request: Network {net['id']} is not a valid external network."
    r = await _fip(h, {"floating_network_id": ext["id"], "port_id": port["id"], "fixed_ip_address": "10.0.0.99"},
                   expect=400)
    assert r["NeutronError"]["type"] == "BadRequest"
    r = await _fip(h, {"floating_network_id": ext["id"], "floating_ip_address": "172.24.4.77"}, expect=403)
    assert r["NeutronError"]["type"] == "PolicyNotAuthorized"
    chosen = (await _fip(h, {"floating_network_id": ext["id"], "floating_ip_address": "172.24.4.77"},
                         ADMIN))["floatingip"]
    assert chosen["floating_ip_address"] == "172.24.4.77"
    taken = await _fip(h, {"floating_network_id": ext["id"], "floating_ip_address": "172.24.4.77"}, ADMIN,
                       expect=409)
    assert taken["NeutronError"]["type"] == "IpAddressInUse"
    r = await _fip(h, {"floating_network_id": "0" * 8 + "-0000-4000-8000-" + "0" * 12}, expect=404)
    assert r["NeutronError"]["type"] == "NetworkNotFound"


async def test_another_projects_floating_ip_and_port(h, client):
    ext, _, _, port = await _wired(h)
    fip = (await _fip(h, {"floating_network_id": ext["id"]}))["floatingip"]
    them = member(OTHER)
    for method, body in (("GET", None), ("PUT", {"floatingip": {"port_id": None}}), ("DELETE", None)):
        resp = await client.request(method, f"/v2.0/floatingips/{fip['id']}", json=body, headers=them)
        assert resp.status_code == 404 and resp.json()["NeutronError"]["type"] == "FloatingIPNotFound"
    assert (await client.get("/v2.0/floatingips", headers=them)).json()["floatingips"] == []
    theirs = (await _fip(h, {"floating_network_id": ext["id"]}, them))["floatingip"]
    resp = await put(h, f"/v2.0/floatingips/{theirs['id']}", {"floatingip": {"port_id": port["id"]}}, them, 404)
    assert resp["NeutronError"]["type"] == "PortNotFound"


async def test_floatingip_quota(h, client):
    ext, _ = await external_network(h)
    await put(h, f"/v2.0/quotas/{PROJECT}", {"quota": {"floatingip": 2}})
    first = (await _fip(h, {"floating_network_id": ext["id"]}))["floatingip"]
    await _fip(h, {"floating_network_id": ext["id"]})
    r = await _fip(h, {"floating_network_id": ext["id"]}, expect=409)
    assert r["NeutronError"]["type"] == "OverQuota" and "floatingip" in r["NeutronError"]["message"]
    details = (await client.get(f"/v2.0/quotas/{PROJECT}/details")).json()["quota"]["floatingip"]
    assert details == {"limit": 2, "used": 2, "reserved": 0}
    assert (await client.delete(f"/v2.0/floatingips/{first['id']}", headers=member())).status_code == 204
    await _fip(h, {"floating_network_id": ext["id"]})


async def test_the_external_network_is_in_use_while_it_has_floating_ips(h, client):
    ext, _ = await external_network(h)
    await _fip(h, {"floating_network_id": ext["id"]})
    resp = await client.delete(f"/v2.0/networks/{ext['id']}")
    assert resp.status_code == 409 and resp.json()["NeutronError"]["type"] == "NetworkInUse"
