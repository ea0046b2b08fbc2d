"""A port is its project's, and the network service's records say what serves what, not a port's
claims:

* only the port's project (or an admin) changes a port (Neutron's ``update_port`` rule): the owner of
  a shared network sees the other projects' ports on it, and may delete them as in Neutron, but
  not rewrite them (their ``device_id``, addresses, security groups, state);
* a port's fixed address that a floating IP points at stays the port's while the floating IP is
  associated (Neutron's ``prevent_internal_ip_change_for_fip``): freed, the address would go to
  another project's port, and the floating IP with it;
* the DHCP agent's port on a network is a ``network:dhcp`` port (a ``device_owner`` only an admin
  gives): a port another project made with the agent's ``device_id`` is not taken for it, nor
  deleted with it.

Each test is the attack, made as the member of a second project (``OTHER``) against the resources
of the first (``PROJECT``, the victim), through the Networking API (and the DHCP agent's calls on
the bus, as the agent makes them)."""

from __future__ import annotations

import pytest

from nefos.clients.network_agents import DhcpPluginAPI
from nefos.control.network.dhcp_rpc import dhcp_device_id

from tests.network.conftest import ADMIN, OTHER, PROJECT, member
from tests.network.l3_helpers import external_network, put, router

VICTIM, ATTACKER = member(PROJECT), member(OTHER)


def _error(r, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    error = r.json()["NeutronError"]
    assert error["type"] == kind, error
    return error["message"]


async def _port(client, port_id: str) -> dict:
    r = await client.get(f"/v2.0/ports/{port_id}", headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()["port"]


# Another project's port on the caller's network -------------------------------------------------

async def test_a_networks_owner_does_not_rewrite_another_projects_port_on_it(h, client):
    net = await h.network("shared-by-attacker", shared=True, headers=ADMIN, project_id=OTHER)
    await h.subnet(net["id"], "10.72.0.0/24", headers=ADMIN, project_id=OTHER)
    victims = await h.port(net["id"], headers=VICTIM)
    other_group = (await h.post("/v2.0/security-groups", {"security_group": {"name": "open"}}, VICTIM))
    before = await _port(client, victims["id"])
    # what the owner sees of the port (it may delete it, as in Neutron) ...
    r = await client.get(f"/v2.0/ports/{victims['id']}", headers=ATTACKER)
    assert r.status_code == 200, r.text
    # ... but not change: a server of its own to hold it, the address, the state, the filters
    for change in ({"device_id": "f" * 32, "device_owner": "compute:nova"}, {"device_id": "f" * 32},
                   {"fixed_ips": [{"ip_address": "10.72.0.99"}]}, {"admin_state_up": False},
                   {"security_groups": [other_group["security_group"]["id"]]}, {"port_security_enabled": False},
                   {"name": "mine"}, {}):
        r = await client.put(f"/v2.0/ports/{victims['id']}", json={"port": change}, headers=ATTACKER)
        assert "(rule:update_port) is disallowed by policy" in _error(r, 403, "PolicyNotAuthorized"), change
    assert await _port(client, victims["id"]) == before
    # its own project still changes it
    r = await client.put(f"/v2.0/ports/{victims['id']}", json={"port": {"name": "still mine"}}, headers=VICTIM)
    assert r.status_code == 200, r.text


# A floating IP's fixed address --------------------------------------------------------------------

async def test_a_floating_ips_fixed_address_is_not_freed_while_it_is_associated(h, client):
    """The attacker's port on the victim's shared network, with the attacker's floating IP through
    the victim's router: freeing the port's address would leave the floating IP pointing at it,
    and the next port given that address (any project's) would take the floating IP's traffic."""
    ext, _ = await external_network(h)
    net = await h.network("shared", shared=True, headers=ADMIN, project_id=PROJECT)
    sub = await h.subnet(net["id"], "10.73.0.0/24", headers=ADMIN, project_id=PROJECT)
    victims_router = await router(h, VICTIM, external_gateway_info={"network_id": ext["id"]})
    await put(h, f"/v2.0/routers/{victims_router['id']}/add_router_interface", {"subnet_id": sub["id"]}, VICTIM)
    port = await h.port(net["id"], headers=ATTACKER)
    [address] = [f["ip_address"] for f in port["fixed_ips"]]
    fip = (await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"],
                                                             "port_id": port["id"]}}, ATTACKER))["floatingip"]
    assert fip["fixed_ip_address"] == address
    for fixed_ips in ([], [{"subnet_id": sub["id"], "ip_address": "10.73.0.77"}]):
        for headers in (ATTACKER, ADMIN):  # an admin's change (Nova's removeFixedIp) too
            r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"fixed_ips": fixed_ips}},
                                 headers=headers)
            if headers is ATTACKER and fixed_ips:
                _error(r, 403, "PolicyNotAuthorized")  # a chosen address is the network owner's anyway
                continue
            message = _error(r, 400, "BadRequest")
            assert "its original fixed_ip has been associated to a floating ip" in message
    assert [f["ip_address"] for f in (await _port(client, port["id"]))["fixed_ips"]] == [address]
    r = await client.get(f"/v2.0/floatingips/{fip['id']}", headers=ATTACKER)
    assert r.json()["floatingip"]["fixed_ip_address"] == address
    # the address held, no other port gets it
    r = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"], "fixed_ips": [
        {"ip_address": address}]}}, headers=VICTIM)
    _error(r, 409, "IpAddressInUse")
    # disassociated, the port's addresses are its own to change again; one kept, another added
    await put(h, f"/v2.0/floatingips/{fip['id']}", {"floatingip": {"port_id": None}}, ATTACKER)
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"fixed_ips": []}}, headers=ATTACKER)
    assert r.status_code == 200 and r.json()["port"]["fixed_ips"] == [], r.text


async def test_a_port_keeps_the_address_of_its_floating_ip_and_changes_the_others(h, client):
    """Neutron's rule asks only that the floating IP's address stay among the port's."""
    ext, _ = await external_network(h)
    net = await h.network("own", headers=VICTIM)
    sub = await h.subnet(net["id"], "10.74.0.0/24", headers=VICTIM)
    mine = await router(h, VICTIM, external_gateway_info={"network_id": ext["id"]})
    await put(h, f"/v2.0/routers/{mine['id']}/add_router_interface", {"subnet_id": sub["id"]}, VICTIM)
    port = await h.port(net["id"], headers=VICTIM, fixed_ips=[{"ip_address": "10.74.0.10"}])
    await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"], "port_id": port["id"],
                                                      "fixed_ip_address": "10.74.0.10"}}, VICTIM)
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"fixed_ips": [
        {"ip_address": "10.74.0.10"}, {"ip_address": "10.74.0.11"}]}}, headers=VICTIM)
    assert r.status_code == 200, r.text
    assert sorted(f["ip_address"] for f in r.json()["port"]["fixed_ips"]) == ["10.74.0.10", "10.74.0.11"]


async def test_a_floating_ip_is_not_pointed_at_another_projects_port(h, client):
    """The owner of a shared network sees the other projects' ports on it; its floating IP may
    still not point at one (Neutron's check), on create nor on update."""
    ext, _ = await external_network(h)
    net = await h.network("shared-by-attacker", shared=True, headers=ADMIN, project_id=OTHER)
    sub = await h.subnet(net["id"], "10.76.0.0/24", headers=ADMIN, project_id=OTHER)
    attackers_router = await router(h, ATTACKER, external_gateway_info={"network_id": ext["id"]})
    await put(h, f"/v2.0/routers/{attackers_router['id']}/add_router_interface", {"subnet_id": sub["id"]}, ATTACKER)
    victims = await h.port(net["id"], headers=VICTIM)
    r = await client.post("/v2.0/floatingips", json={"floatingip": {
        "floating_network_id": ext["id"], "port_id": victims["id"]}}, headers=ATTACKER)
    assert "owned by a different tenant" in _error(r, 400, "BadRequest")
    fip = (await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"]}}, ATTACKER))
    r = await client.put(f"/v2.0/floatingips/{fip['floatingip']['id']}", json={"floatingip": {
        "port_id": victims["id"]}}, headers=ATTACKER)
    assert "owned by a different tenant" in _error(r, 400, "BadRequest")
    r = await client.get("/v2.0/floatingips", params={"port_id": victims["id"]}, headers=ADMIN)
    assert r.json()["floatingips"] == []


async def test_a_member_chooses_no_address_on_the_external_network(h, client):
    """The external network's addresses a member gets are the pool's next (Neutron's admin-only
    ``create_router:external_gateway_info:external_fixed_ips`` and ``create_floatingip:floating_ip_address``):
    choosing one would take the address another project's router or floating IP is known by."""
    ext, ext_sub = await external_network(h)
    wanted = [{"subnet_id": ext_sub["id"], "ip_address": "172.24.4.77"}]
    r = await client.post("/v2.0/routers", json={"router": {"name": "r", "external_gateway_info": {
        "network_id": ext["id"], "external_fixed_ips": wanted}}}, headers=ATTACKER)
    assert "external_gateway_info:external_fixed_ips" in _error(r, 403, "PolicyNotAuthorized")
    mine = await router(h, ATTACKER, external_gateway_info={"network_id": ext["id"]})
    r = await client.put(f"/v2.0/routers/{mine['id']}", json={"router": {"external_gateway_info": {
        "network_id": ext["id"], "external_fixed_ips": wanted}}}, headers=ATTACKER)
    assert "external_gateway_info:external_fixed_ips" in _error(r, 403, "PolicyNotAuthorized")
    r = await client.post("/v2.0/floatingips", json={"floatingip": {
        "floating_network_id": ext["id"], "floating_ip_address": "172.24.4.77"}}, headers=ATTACKER)
    assert "floating_ip_address" in _error(r, 403, "PolicyNotAuthorized")
    r = await client.get("/v2.0/ports", params={"fixed_ips": "ip_address=172.24.4.77"}, headers=ADMIN)
    assert r.json()["ports"] == []


# The DHCP agent's port ----------------------------------------------------------------------------

@pytest.mark.parametrize("device_owner", ["", "compute:nova"])
async def test_a_port_naming_the_dhcp_agents_device_is_not_its_dhcp_port(h, client, rt, device_owner):
    """A member plants a port with the DHCP agent's ``device_id`` on a shared network before its
    first subnet (the id is the agent's host and the network: ``dhcp-localhost-<network>`` with the
    shipped ``host``); the agent's port is still one of its own, and going, it leaves the member's."""
    net = await h.network("shared", shared=True, headers=ADMIN, project_id=PROJECT)
    agent = DhcpPluginAPI(rt.bus, rt.cfg.host)
    planted = await h.port(net["id"], headers=ATTACKER, device_id=dhcp_device_id(rt.cfg.host, net["id"]),
                           device_owner=device_owner)
    await h.subnet(net["id"], "10.75.0.0/24", headers=ADMIN, project_id=PROJECT)
    dhcp = await agent.get_dhcp_port(net["id"])
    assert dhcp["id"] != planted["id"]
    assert dhcp["device_owner"] == "network:dhcp" and dhcp["project_id"] == PROJECT
    assert (await agent.get_dhcp_port(net["id"]))["id"] == dhcp["id"]  # found again, the same
    await agent.release_dhcp_port(net["id"])
    assert (await client.get(f"/v2.0/ports/{dhcp['id']}", headers=ADMIN)).status_code == 404
    assert (await _port(client, planted["id"]))["project_id"] == OTHER  # the member's port stays
