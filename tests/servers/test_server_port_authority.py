"""A server's ports are made with the authority of the caller who asked for the server, as Nova
makes them with the user's token (only the binding, ``binding:host_id``, is the service's): what a
project may not do through ``POST /v2.0/ports`` it may not do through a boot or an interface attach
either. A subnet's gateway address is never given to a port that is not a router's, and a server
takes no port of another project (Nova's ``PortNotUsable``), not even on its own project's network.

Every attack goes through the Compute API as a member of a second project (or, for another
project's port, as the owner of the network it is on), on a whole cloud with fake hosts."""

from __future__ import annotations

import pytest

from tests.clouds import ADMIN, member

OWNER = member(project="a" * 32, user="w" * 32)  # owns the shared network
TENANT = member(project="b" * 32, user="v" * 32)  # another project, using it
GATEWAY = "10.70.0.1"


@pytest.fixture
async def shared(cloud) -> dict:
    """The owner's network, shared with every project (sharing is an admin's act, as in Neutron)."""
    r = await cloud.network.post("/v2.0/networks", json={"network": {
        "name": "shared", "shared": True, "project_id": OWNER["X-Project-Id"]}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    net = r.json()["network"]
    r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": net["id"], "cidr": "10.70.0.0/24", "ip_version": 4}}, headers=OWNER)
    assert r.status_code == 201, r.text
    assert r.json()["subnet"]["gateway_ip"] == GATEWAY
    return {**net, "subnet_id": r.json()["subnet"]["id"]}


async def _holders(cloud, network_id: str, address: str) -> list[dict]:
    """The ports holding ``address`` on the network (as an admin sees them)."""
    return await cloud.ports(network_id=network_id, fixed_ips=f"ip_address={address}")


async def _active_server(cloud, headers: dict, networks: list[dict], name="vm") -> str:
    server_id = (await cloud.boot(name=name, networks=networks, headers=headers))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=headers)
    return server_id


async def _attach(cloud, server_id: str, attachment: dict, headers: dict):
    return await cloud.compute.post(f"/v2.1/servers/{server_id}/os-interface",
                                    json={"interfaceAttachment": attachment}, headers=headers)


def _nova_error(r, code: int) -> str:
    assert r.status_code == code, r.text
    (body,) = r.json().values()
    assert body["code"] == code, body
    return body["message"]


# Fixed IPs and the gateway -------------------------------------------------------------------------

async def test_a_tenant_cannot_boot_a_server_holding_a_shared_networks_gateway(cloud, shared):
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "thief", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": shared["id"], "fixed_ip": GATEWAY}]}}, headers=TENANT)
    assert "gateway" in _nova_error(r, 400)
    assert await _holders(cloud, shared["id"], GATEWAY) == []
    r = await cloud.compute.get("/v2.1/servers", headers=TENANT)
    assert r.json()["servers"] == []  # nothing half-made


async def test_a_tenant_cannot_boot_with_a_chosen_address_on_another_projects_network(cloud, shared):
    # The direct request is refused by the owner-only rule...
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": shared["id"], "fixed_ips": [{"ip_address": "10.70.0.50"}]}}, headers=TENANT)
    assert r.status_code == 403, r.text
    # ...and so is the same port asked for through a boot: the build fails as the port is made.
    server_id = (await cloud.boot(name="squatter", networks=[{"uuid": shared["id"], "fixed_ip": "10.70.0.50"}],
                                  headers=TENANT))["server"]["id"]
    server = await cloud.wait_status(server_id, "ERROR", headers=ADMIN)
    assert "create_port:fixed_ips:ip_address" in server["fault"]["details"], server["fault"]
    assert await _holders(cloud, shared["id"], "10.70.0.50") == []
    assert await cloud.ports(device_id=server_id) == []


async def test_a_tenant_cannot_attach_an_interface_holding_the_gateway_or_a_chosen_address(cloud, shared):
    server_id = await _active_server(cloud, TENANT, [{"uuid": shared["id"]}])
    # The port is asked for as the tenant: the owner-only rule answers first, as for POST /v2.0/ports.
    for address in (GATEWAY, "10.70.0.60"):
        r = await _attach(cloud, server_id, {"net_id": shared["id"], "fixed_ips": [{"ip_address": address}]},
                          TENANT)
        assert "create_port:fixed_ips:ip_address" in _nova_error(r, 403)
    assert await _holders(cloud, shared["id"], GATEWAY) == []
    assert await _holders(cloud, shared["id"], "10.70.0.60") == []
    assert len(await cloud.ports(device_id=server_id)) == 1


async def test_not_even_the_networks_owner_or_an_admin_gives_the_gateway_to_a_server(cloud, shared):
    for who in (OWNER, ADMIN):
        r = await cloud.compute.post("/v2.1/servers", json={"server": {
            "name": "gw", "imageRef": await cloud.default_image(), "flavorRef": "1",
            "networks": [{"uuid": shared["id"], "fixed_ip": GATEWAY}]}}, headers=who)
        assert "gateway" in _nova_error(r, 400)
    server_id = await _active_server(cloud, OWNER, [{"uuid": shared["id"], "fixed_ip": "10.70.0.20"}])
    r = await _attach(cloud, server_id, {"net_id": shared["id"], "fixed_ips": [{"ip_address": GATEWAY}]}, OWNER)
    assert "gateway" in _nova_error(r, 400)
    # Nor through the Networking API: a compute port there, or a port given a compute owner later.
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": shared["id"], "device_owner": "compute:nova",
        "fixed_ips": [{"ip_address": GATEWAY}]}}, headers=OWNER)
    assert r.status_code == 400 and r.json()["NeutronError"]["type"] == "InvalidIpForSubnet", r.text
    assert await _holders(cloud, shared["id"], GATEWAY) == []


async def test_the_owners_own_fixed_ip_and_router_interface_keep_working(cloud, shared):
    server_id = await _active_server(cloud, OWNER, [{"uuid": shared["id"], "fixed_ip": "10.70.0.20"}])
    (port,) = await cloud.ports(device_id=server_id)
    assert [f["ip_address"] for f in port["fixed_ips"]] == ["10.70.0.20"]
    assert port["project_id"] == OWNER["X-Project-Id"] and port["binding:host_id"] in cloud.hosts
    r = await cloud.network.post("/v2.0/routers", json={"router": {"name": "r"}}, headers=OWNER)
    router = r.json()["router"]
    r = await cloud.network.put(f"/v2.0/routers/{router['id']}/add_router_interface",
                                json={"subnet_id": shared["subnet_id"]}, headers=OWNER)
    assert r.status_code == 200, r.text
    (interface,) = await _holders(cloud, shared["id"], GATEWAY)
    assert interface["device_owner"] == "network:router_interface"


async def test_a_tenants_server_on_a_shared_network_gets_its_own_port_bound_to_its_host(cloud, shared):
    server_id = await _active_server(cloud, TENANT, [{"uuid": shared["id"]}])
    (port,) = await cloud.ports(device_id=server_id)
    assert port["project_id"] == TENANT["X-Project-Id"]
    assert port["device_owner"].startswith("compute:") and port["binding:host_id"] in cloud.hosts
    assert port["fixed_ips"][0]["ip_address"] != GATEWAY
    attached = await _attach(cloud, server_id, {"net_id": shared["id"]}, TENANT)
    assert attached.status_code == 200, attached.text
    (new,) = [p for p in await cloud.ports(device_id=server_id) if p["id"] != port["id"]]
    assert new["project_id"] == TENANT["X-Project-Id"] and new["binding:host_id"] == port["binding:host_id"]
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=TENANT)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(server_id, headers=TENANT)
    assert await cloud.ports(device_id=server_id) == []


# Another project's port --------------------------------------------------------------------------

@pytest.fixture
async def tenants_port(cloud, shared) -> dict:
    """A free port of the second project on the owner's shared network."""
    r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": shared["id"], "name": "b-port"}},
                                 headers=TENANT)
    assert r.status_code == 201, r.text
    return r.json()["port"]


async def _unchanged(cloud, port: dict) -> None:
    r = await cloud.network.get(f"/v2.0/ports/{port['id']}")
    now = r.json()["port"]
    assert (now["project_id"], now["device_id"], now["device_owner"], now["binding:host_id"]) == (
        port["project_id"], "", "", "")


async def test_the_networks_owner_cannot_boot_with_another_projects_port(cloud, shared, tenants_port):
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "taker", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"port": tenants_port["id"]}]}}, headers=OWNER)
    assert f"Port {tenants_port['id']} not usable" in _nova_error(r, 400)
    await _unchanged(cloud, tenants_port)
    r = await cloud.compute.get("/v2.1/servers", headers=OWNER)
    assert r.json()["servers"] == []


async def test_the_networks_owner_cannot_attach_another_projects_port(cloud, shared, tenants_port):
    server_id = await _active_server(cloud, OWNER, [{"uuid": shared["id"]}])
    r = await _attach(cloud, server_id, {"port_id": tenants_port["id"]}, OWNER)
    assert f"Port {tenants_port['id']} not usable for instance {server_id}" in _nova_error(r, 400)
    await _unchanged(cloud, tenants_port)
    assert len(await cloud.ports(device_id=server_id)) == 1


async def test_an_admins_server_takes_no_port_of_another_project_either(cloud, shared, tenants_port):
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "admin-taker", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"port": tenants_port["id"]}]}}, headers=ADMIN)
    assert "not usable" in _nova_error(r, 400)
    await _unchanged(cloud, tenants_port)


async def test_a_project_boots_with_and_attaches_its_own_port_on_a_shared_network(cloud, shared, tenants_port):
    server_id = await _active_server(cloud, TENANT, [{"port": tenants_port["id"]}])
    (port,) = await cloud.ports(device_id=server_id)
    assert port["id"] == tenants_port["id"] and port["binding:host_id"] in cloud.hosts
    r = await cloud.network.post("/v2.0/ports", json={"port": {"network_id": shared["id"]}}, headers=TENANT)
    second = r.json()["port"]
    r = await _attach(cloud, server_id, {"port_id": second["id"]}, TENANT)
    assert r.status_code == 200, r.text
    assert {p["id"] for p in await cloud.ports(device_id=server_id)} == {tenants_port["id"], second["id"]}


# A port naming another project's server ----------------------------------------------------------

async def test_a_port_naming_another_projects_server_is_no_part_of_it(cloud, shared):
    """Any project may give its port any ``device_id`` (Neutron's default), so a server's ports are
    those naming it *and of its project* (Nova lists them with ``tenant_id``): the owner of a
    shared network, who sees the servers' ids on its ports there, plants a port of its own naming
    the tenant's server on its private network. The server's interfaces do not list it, a move
    neither binds it to the server's host nor plugs it into the server, and the server's delete
    leaves it alone."""
    server_id = await _active_server(cloud, TENANT, [{"uuid": shared["id"]}], name="victim")
    (own,) = await cloud.ports(device_id=server_id)
    r = await cloud.network.get("/v2.0/ports", params={"network_id": shared["id"]}, headers=OWNER)
    assert server_id in {p["device_id"] for p in r.json()["ports"]}  # how the owner learns the id
    private = await cloud.make_network(name="owners", cidr="10.71.0.0/24", headers=OWNER)
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": private["id"], "device_id": server_id, "device_owner": "compute:nova"}}, headers=OWNER)
    assert r.status_code == 201, r.text
    planted = r.json()["port"]

    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-interface", headers=TENANT)
    assert [a["port_id"] for a in r.json()["interfaceAttachments"]] == [own["id"]]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-interface/{planted['id']}", headers=TENANT)
    assert r.status_code == 404, r.text
    # a move binds the server's ports to its new host and plugs them: shelve, unshelve
    await cloud.action(server_id, {"shelve": None}, headers=TENANT)
    await cloud.wait_status(server_id, "SHELVED_OFFLOADED", headers=TENANT)
    await cloud.action(server_id, {"unshelve": None}, headers=TENANT)
    server = await cloud.wait_status(server_id, "ACTIVE", headers=TENANT)
    assert set(server["addresses"]) == {"shared"}, server["addresses"]
    driver = cloud.driver((await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"])
    assert planted["id"] not in driver.plugged_vifs and driver.plugged_vifs.get(own["id"]) == server_id
    (after,) = await cloud.ports(id=planted["id"])
    assert after["binding:host_id"] == "" and after["project_id"] == OWNER["X-Project-Id"]
    # the server's delete takes its own port, not the one naming it
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=TENANT)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(server_id, headers=TENANT)
    assert [p["id"] for p in await cloud.ports(device_id=server_id)] == [planted["id"]]


async def test_a_tenant_takes_no_address_of_the_external_network_through_a_server(cloud):
    """Nova's ``ExternalNetworkAttachForbidden`` (403) for a network ``router:external`` and not
    shared, by boot (with a chosen address too) and by interface attach: the external network's
    addresses are for floating IPs and router gateways, as through ``POST /v2.0/ports``."""
    r = await cloud.network.post("/v2.0/networks", json={"network": {"name": "public", "router:external": True}},
                                 headers=ADMIN)
    ext = r.json()["network"]
    r = await cloud.network.post("/v2.0/subnets", json={"subnet": {
        "network_id": ext["id"], "cidr": "172.24.9.0/24", "ip_version": 4, "enable_dhcp": False}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    for networks in ([{"uuid": ext["id"]}], [{"uuid": ext["id"], "fixed_ip": "172.24.9.50"}]):
        r = await cloud.compute.post("/v2.1/servers", json={"server": {
            "name": "squatter", "imageRef": await cloud.default_image(), "flavorRef": "1",
            "networks": networks}}, headers=TENANT)
        assert f"not allowed to create an interface on external network {ext['id']}" in _nova_error(r, 403)
    own = await cloud.make_network(name="own", cidr="10.77.0.0/24", headers=TENANT)
    server_id = await _active_server(cloud, TENANT, [{"uuid": own["id"]}])
    for attachment in ({"net_id": ext["id"]}, {"net_id": ext["id"], "fixed_ips": [{"ip_address": "172.24.9.51"}]}):
        r = await _attach(cloud, server_id, attachment, TENANT)
        assert f"external network {ext['id']}" in _nova_error(r, 403), attachment
    assert await cloud.ports(network_id=ext["id"]) == []
