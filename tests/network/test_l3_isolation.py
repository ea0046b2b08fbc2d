"""No project reaches another's routers or the public pool through the Networking API: a router
takes an interface only on a subnet its project owns (by subnet and by port, Neutron's rule); only
an admin gives a port a ``network:*`` device_owner, and no port names a router of another project
(Neutron's ``DeviceIDNotOwnedByTenant``); a router is built (L3 agent, ``RouterInUse``) only from
the interfaces made through the router API; and ports on a ``router:external`` network not shared
with the caller are refused (Neutron's ``create_port`` rule: the network's owner, or shared), so
its addresses go to floating IPs and router gateways, under their own quotas.

Each test is the attack, made as the member of a second project (``OTHER``) against the resources
of the first (``PROJECT``, the victim)."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select

from nefos.db.migrate import upgrade
from nefos.db.models import Network, Port, Router, RouterPort
from nefos.db.session import Database

from tests.backends import BACKENDS, fresh_database
from tests.network.conftest import ADMIN, OTHER, PROJECT, member
from tests.network.l3_helpers import external_network, put, router, tenant_network

VICTIM, ATTACKER = member(PROJECT), member(OTHER)


@pytest.fixture
async def shared(h):
    """A network the victim owns and shares with every project, with the victim's subnet."""
    net = await h.network("shared-net", shared=True, headers=ADMIN, project_id=PROJECT)
    sub = await h.subnet(net["id"], "10.70.0.0/24", headers=ADMIN, project_id=PROJECT)
    return net, sub


def _error(r, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    error = r.json()["NeutronError"]
    assert error["type"] == kind, error
    return error["message"]


async def _ports_of(client, **filters) -> list[dict]:
    return (await client.get("/v2.0/ports", params=filters, headers=ADMIN)).json()["ports"]


async def test_a_router_takes_no_interface_on_another_projects_shared_subnet(h, client, shared):
    net, sub = shared
    mine = await router(h, ATTACKER)
    r = await client.put(f"/v2.0/routers/{mine['id']}/add_router_interface", json={"subnet_id": sub["id"]},
                         headers=ATTACKER)
    message = _error(r, 400, "BadRequest")
    assert f"subnet {sub['id']} is not owned by project making the request" in message
    assert await _ports_of(client, network_id=net["id"]) == []  # nothing half-made
    # the gateway address stays the owner's: its own router takes it
    owners = await router(h, VICTIM)
    info = await put(h, f"/v2.0/routers/{owners['id']}/add_router_interface", {"subnet_id": sub["id"]}, VICTIM)
    [port] = await _ports_of(client, network_id=net["id"])
    assert port["id"] == info["port_id"] and port["fixed_ips"][0]["ip_address"] == sub["gateway_ip"]


async def test_a_router_takes_no_port_on_another_projects_shared_subnet(h, client, shared):
    net, _ = shared
    port = await h.port(net["id"], headers=ATTACKER)  # a guest port: allowed on a shared network
    mine = await router(h, ATTACKER)
    r = await client.put(f"/v2.0/routers/{mine['id']}/add_router_interface", json={"port_id": port["id"]},
                         headers=ATTACKER)
    message = _error(r, 400, "BadRequest")
    assert "is not owned by project making the request" in message
    [after] = await _ports_of(client, id=port["id"])
    assert after["device_owner"] == "" and after["device_id"] == ""
    assert (await client.get(f"/v2.0/ports?device_id={mine['id']}", headers=ADMIN)).json()["ports"] == []


async def test_a_router_takes_no_port_of_another_project_on_its_own_network(h, client):
    """The network's owner sees a port another project made on its shared network; its router may
    still not take it (the port would move to the owner's router under the other project's name)."""
    net = await h.network("shared-by-attacker", shared=True, headers=ADMIN, project_id=OTHER)
    await h.subnet(net["id"], "10.71.0.0/24", headers=ADMIN, project_id=OTHER)
    victims_port = await h.port(net["id"], headers=VICTIM)
    mine = await router(h, ATTACKER)
    r = await client.put(f"/v2.0/routers/{mine['id']}/add_router_interface", json={"port_id": victims_port["id"]},
                         headers=ATTACKER)
    _error(r, 400, "BadRequest")
    [after] = await _ports_of(client, id=victims_port["id"])
    assert after["device_owner"] == "" and after["device_id"] == ""


@pytest.mark.parametrize("owner", ["network:router_interface", "network:router_gateway", "network:dhcp",
                                   "network:floatingip", "network:anything"])
async def test_a_member_gives_no_port_a_network_device_owner_on_its_own_network(h, client, owner):
    victims = await router(h, VICTIM)
    net, _ = await tenant_network(h, "10.72.0.0/24", headers=ATTACKER)
    r = await client.post("/v2.0/ports", json={"port": {"network_id": net["id"], "device_owner": owner,
                                                        "device_id": victims["id"]}}, headers=ATTACKER)
    assert "create_port:device_owner" in _error(r, 403, "PolicyNotAuthorized")
    plain = await h.port(net["id"], headers=ATTACKER)
    r = await client.put(f"/v2.0/ports/{plain['id']}", json={"port": {"device_owner": owner,
                                                                      "device_id": victims["id"]}}, headers=ATTACKER)
    assert "update_port:device_owner" in _error(r, 403, "PolicyNotAuthorized")
    assert await _ports_of(client, device_id=victims["id"]) == []
    # the victim's router stays its own to delete
    assert (await client.delete(f"/v2.0/routers/{victims['id']}", headers=VICTIM)).status_code == 204


async def test_a_router_interface_port_is_not_moved_to_another_projects_router(h, client):
    victims = await router(h, VICTIM)
    net, sub = await tenant_network(h, "10.73.0.0/24", headers=ATTACKER)
    mine = await router(h, ATTACKER)
    info = await put(h, f"/v2.0/routers/{mine['id']}/add_router_interface", {"subnet_id": sub["id"]}, ATTACKER)
    r = await client.put(f"/v2.0/ports/{info['port_id']}", json={"port": {"device_id": victims["id"]}},
                         headers=ATTACKER)
    message = _error(r, 409, "DeviceIDNotOwnedByTenant")
    assert victims["id"] in message
    [port] = await _ports_of(client, id=info["port_id"])
    assert port["device_id"] == mine["id"]
    assert (await client.delete(f"/v2.0/routers/{victims['id']}", headers=VICTIM)).status_code == 204


async def test_a_look_alike_port_is_no_part_of_the_router_it_names(h, client, manager):
    """A port that only says it is a router's (made by an admin through the port API, or before
    these rules): the router it names is built without it and is deleted as if it were not there."""
    victims = await router(h, VICTIM)
    vnet, vsub = await tenant_network(h, "10.74.0.0/24", headers=VICTIM)
    await put(h, f"/v2.0/routers/{victims['id']}/add_router_interface", {"subnet_id": vsub["id"]}, VICTIM)
    net, _ = await tenant_network(h, "10.75.0.0/24", headers=ATTACKER)
    look_alike = await h.port(net["id"], headers=ADMIN, project_id=OTHER, device_owner="network:router_interface",
                              device_id=victims["id"])
    [built] = await manager.routers.routers_for_agent([victims["id"]])
    assert [i["network_id"] for i in built["interfaces"]] == [vnet["id"]]
    assert look_alike["id"] not in await manager.routers.bind_router_ports("l3-host", [victims["id"]])
    await put(h, f"/v2.0/routers/{victims['id']}/remove_router_interface", {"subnet_id": vsub["id"]}, VICTIM)
    assert (await client.delete(f"/v2.0/routers/{victims['id']}", headers=VICTIM)).status_code == 204
    # its router gone, the look-alike is an ordinary port again: its owner may delete it
    assert (await client.delete(f"/v2.0/ports/{look_alike['id']}", headers=ATTACKER)).status_code == 204


async def test_a_member_makes_no_port_on_the_external_network(h, client):
    ext, _ = await external_network(h)
    r = await client.post("/v2.0/ports", json={"port": {"network_id": ext["id"]}}, headers=ATTACKER)
    assert "create_port" in _error(r, 403, "PolicyNotAuthorized")
    r = await client.post("/v2.0/ports", json={"ports": [{"network_id": ext["id"]}] * 3}, headers=ATTACKER)
    _error(r, 403, "PolicyNotAuthorized")
    assert await _ports_of(client, network_id=ext["id"]) == []
    # its addresses are for floating IPs and router gateways, which the member still gets
    fip = await h.post("/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"]}}, ATTACKER)
    assert fip["floatingip"]["floating_ip_address"].startswith("172.24.4.")
    gw = await router(h, ATTACKER, external_gateway_info={"network_id": ext["id"]})
    assert gw["external_gateway_info"]["external_fixed_ips"]


async def test_ports_on_an_external_network_shared_with_the_caller_or_its_own_are_allowed(h, client):
    shared_ext = await h.network("shared-public", shared=True, **{"router:external": True})
    await h.subnet(shared_ext["id"], "172.25.4.0/24", enable_dhcp=False)
    assert (await h.port(shared_ext["id"], headers=ATTACKER))["network_id"] == shared_ext["id"]
    own_ext = await h.network("own-public", project_id=OTHER, **{"router:external": True})
    await h.subnet(own_ext["id"], "172.25.5.0/24", enable_dhcp=False, project_id=OTHER)
    assert (await h.port(own_ext["id"], headers=ATTACKER))["network_id"] == own_ext["id"]
    ext, _ = await external_network(h)
    assert (await h.port(ext["id"], headers=ADMIN))["network_id"] == ext["id"]


@pytest.fixture(params=BACKENDS)
def empty_database_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'upgraded.sqlite'}"
        return
    with fresh_database(request.param) as url:
        yield url


async def test_an_upgrade_keeps_the_interfaces_the_router_api_made_and_no_look_alike(empty_database_url):
    """In a database older than ``routerports`` a router's interfaces are the ports naming it:
    upgraded, those its own project holds (what the router API made) stay its interfaces; another
    project's port naming it does not become one."""
    db = Database(empty_database_url)
    try:
        await upgrade(db, "0018")
        async with db.engine.begin() as conn:
            for net in ("victims-net", "attackers-net"):
                await conn.execute(insert(Network.__table__).values(id=net, project_id=PROJECT, name=net,
                                                                    status="ACTIVE", mtu=1450))
            await conn.execute(insert(Router.__table__).values(id="victims-router", project_id=PROJECT))
            for port, net, project, mac in (("interface", "victims-net", PROJECT, "fa:16:3e:00:00:01"),
                                            ("look-alike", "attackers-net", OTHER, "fa:16:3e:00:00:02")):
                await conn.execute(insert(Port.__table__).values(
                    id=port, network_id=net, project_id=project, mac_address=mac,
                    device_owner="network:router_interface", device_id="victims-router"))
        await upgrade(db)
        async with db.engine.connect() as conn:
            rows = (await conn.execute(select(RouterPort.__table__))).all()
    finally:
        await db.dispose()
    assert [(r.port_id, r.router_id, r.port_type) for r in rows] == [
        ("interface", "victims-router", "network:router_interface")]


async def test_a_look_alike_port_carries_no_floating_ip_through_the_router_it_names(h, client):
    """A floating IP goes through the router holding an interface on its port's subnet: one that
    a port only claims is not there, so the victim's router does not NAT the attacker's guests."""
    ext, _ = await external_network(h)
    victims = await router(h, VICTIM, external_gateway_info={"network_id": ext["id"]})
    net, sub = await tenant_network(h, "10.76.0.0/24", headers=ATTACKER)
    await h.port(net["id"], headers=ADMIN, project_id=OTHER, device_owner="network:router_interface",
                 device_id=victims["id"], fixed_ips=[{"subnet_id": sub["id"], "ip_address": sub["gateway_ip"]}])
    guest = await h.port(net["id"], headers=ATTACKER)
    r = await client.post("/v2.0/floatingips", json={"floatingip": {
        "floating_network_id": ext["id"], "port_id": guest["id"]}}, headers=ATTACKER)
    _error(r, 404, "ExternalGatewayForFloatingIPNotFound")
    assert (await client.get("/v2.0/floatingips", headers=ADMIN)).json()["floatingips"] == []
