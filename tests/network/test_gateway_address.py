"""A subnet's gateway address is held only by a router's interface on that subnet, or by a port owned by
nothing yet (made to become one through ``add_router_interface``): no guest's, DHCP server's, router
gateway's or floating IP's port gets it, whoever asks (the network's owner and an admin too), by a
create, by an update of its addresses or its owner, or by moving the subnet's gateway onto it.
Refused with Neutron's answer for the other address it keeps for routers (an IPv6 subnet's anycast
address): InvalidIpForSubnet, 400; moving the gateway onto a taken address is IpAddressInUse, 409."""

from __future__ import annotations

import pytest

from tests.network.conftest import ADMIN, PROJECT, member

OWNER = member(PROJECT)
GATEWAY = "10.62.0.1"


@pytest.fixture
async def subnet(h) -> dict:
    net = await h.network("gw-net", headers=OWNER)
    return await h.subnet(net["id"], "10.62.0.0/24", headers=OWNER)


def _refused(r, kind="InvalidIpForSubnet", code=400) -> None:
    assert r.status_code == code, r.text
    assert r.json()["NeutronError"]["type"] == kind, r.text


async def _holders(client, subnet) -> list[dict]:
    r = await client.get("/v2.0/ports", params={"network_id": subnet["network_id"],
                                                "fixed_ips": f"ip_address={GATEWAY}"}, headers=ADMIN)
    return r.json()["ports"]


@pytest.mark.parametrize("who, device_owner", [
    *(("owner", o) for o in ("compute:nova", "anything:else")),  # network:* owners are the admin's alone
    *(("admin", o) for o in ("compute:nova", "network:dhcp", "network:router_gateway", "network:floatingip",
                             "anything:else"))])
async def test_no_port_but_a_router_interface_is_created_on_the_gateway(client, subnet, device_owner, who):
    r = await client.post("/v2.0/ports", json={"port": {
        "network_id": subnet["network_id"], "device_owner": device_owner,
        "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": GATEWAY}]}}, headers=OWNER if who == "owner" else ADMIN)
    _refused(r)
    assert "gateway" in r.json()["NeutronError"]["message"]
    assert await _holders(client, subnet) == []  # nothing half-made


async def test_a_guest_port_cannot_move_onto_the_gateway(client, h, subnet):
    port = await h.port(subnet["network_id"], headers=OWNER, device_owner="compute:nova")
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"fixed_ips": [{"ip_address": GATEWAY}]}},
                         headers=OWNER)
    _refused(r)
    r = await client.get(f"/v2.0/ports/{port['id']}", headers=OWNER)
    assert r.json()["port"]["fixed_ips"] == port["fixed_ips"]


async def test_an_unowned_port_on_the_gateway_becomes_a_router_interface_never_a_guests(client, h, subnet):
    port = await h.port(subnet["network_id"], headers=OWNER, fixed_ips=[{"ip_address": GATEWAY}])
    for owner in ("compute:nova", "network:dhcp"):
        r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"device_owner": owner}}, headers=ADMIN)
        _refused(r)
    # What Nova's claim of a user's port sends: refused too, and the port stays free.
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {
        "device_id": "a-server", "device_owner": "compute:nova", "binding:host_id": "host-1"}}, headers=ADMIN)
    _refused(r)
    r = await client.get(f"/v2.0/ports/{port['id']}", headers=ADMIN)
    assert (r.json()["port"]["device_id"], r.json()["port"]["device_owner"]) == ("", "")
    router = (await h.post("/v2.0/routers", {"router": {"name": "r"}}, OWNER))["router"]
    r = await client.put(f"/v2.0/routers/{router['id']}/add_router_interface", json={"port_id": port["id"]},
                         headers=OWNER)
    assert r.status_code == 200, r.text
    (interface,) = await _holders(client, subnet)
    assert interface["id"] == port["id"] and interface["device_owner"] == "network:router_interface"


async def test_the_subnets_gateway_is_not_moved_onto_a_guests_address(client, h, subnet):
    guest = await h.port(subnet["network_id"], headers=OWNER, device_owner="compute:nova")
    address = guest["fixed_ips"][0]["ip_address"]
    r = await client.put(f"/v2.0/subnets/{subnet['id']}", json={"subnet": {"gateway_ip": address}}, headers=OWNER)
    _refused(r, "IpAddressInUse", 409)
    r = await client.get(f"/v2.0/subnets/{subnet['id']}", headers=OWNER)
    assert r.json()["subnet"]["gateway_ip"] == GATEWAY
    # A free address, or one a router's interface holds already, may be the gateway.
    r = await client.put(f"/v2.0/subnets/{subnet['id']}", json={"subnet": {"gateway_ip": "10.62.0.254",
                                                                           "allocation_pools": [{
                                                                               "start": "10.62.0.2",
                                                                               "end": "10.62.0.200"}]}},
                         headers=OWNER)
    assert r.status_code == 200, r.text


async def test_a_router_interface_takes_the_gateway(client, h, subnet):
    router = (await h.post("/v2.0/routers", {"router": {"name": "r"}}, OWNER))["router"]
    r = await client.put(f"/v2.0/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]},
                         headers=OWNER)
    assert r.status_code == 200, r.text
    (interface,) = await _holders(client, subnet)
    assert interface["device_owner"] == "network:router_interface"
