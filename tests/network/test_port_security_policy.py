"""On a shared network, only its owner or an admin may turn port security off on a port or give a
port a device_owner other than a compute one (Neutron's create_port/update_port
:port_security_enabled and :device_owner rules): a tenant cannot lift anti-spoofing for itself
there, nor pass its port off as the network's router or DHCP server. (A ``network:*`` owner is the
admin's alone, on any network: tests/network/test_l3_isolation.py.)"""

from __future__ import annotations

import pytest

from tests.network.conftest import ADMIN, OTHER, PROJECT, member

OWNER, TENANT = member(PROJECT), member(OTHER)


@pytest.fixture
async def shared(h):
    net = await h.network("shared-net", shared=True, headers=ADMIN, project_id=PROJECT)
    await h.subnet(net["id"], "10.60.0.0/24", headers=ADMIN)
    return net


def _refused(r, rule: str) -> None:
    assert r.status_code == 403, r.text
    error = r.json()["NeutronError"]
    assert error["type"] == "PolicyNotAuthorized" and rule in error["message"], error


@pytest.mark.parametrize("extra, rule", [
    ({"port_security_enabled": False}, "create_port:port_security_enabled"),
    ({"device_owner": "network:router_interface"}, "create_port:device_owner"),
    ({"device_owner": "network:dhcp"}, "create_port:device_owner"),
    ({"device_owner": "anything:else"}, "create_port:device_owner"),
])
async def test_a_tenant_cannot_create_such_a_port_on_a_shared_network(client, shared, extra, rule):
    r = await client.post("/v2.0/ports", json={"port": {"network_id": shared["id"], **extra}}, headers=TENANT)
    _refused(r, rule)
    r = await client.get("/v2.0/ports", params={"network_id": shared["id"]}, headers=ADMIN)
    assert [p for p in r.json()["ports"] if p["project_id"] == OTHER] == []  # nothing half-made


async def test_a_tenant_cannot_update_its_port_so(client, h, shared):
    port = await h.port(shared["id"], headers=TENANT, device_owner="compute:nova")
    assert port["port_security_enabled"] is True
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"port_security_enabled": False,
                                                                     "security_groups": []}}, headers=TENANT)
    _refused(r, "update_port:port_security_enabled")
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {"device_owner": "network:router_gateway"}},
                         headers=TENANT)
    _refused(r, "update_port:device_owner")
    # What a guest port may do stays allowed: a name, its own compute owner, port security on.
    r = await client.put(f"/v2.0/ports/{port['id']}", json={"port": {
        "name": "mine", "device_owner": "compute:nova", "port_security_enabled": True}}, headers=TENANT)
    assert r.status_code == 200, r.text
    r = await client.get(f"/v2.0/ports/{port['id']}", headers=ADMIN)
    assert r.json()["port"]["port_security_enabled"] is True


@pytest.mark.parametrize("who, owner", [("owner", "anything:else"), ("admin", "network:router_interface")])
async def test_the_network_owner_and_an_admin_may(client, shared, who, owner):
    headers = OWNER if who == "owner" else ADMIN
    r = await client.post("/v2.0/ports", json={"port": {"network_id": shared["id"], "port_security_enabled": False,
                                                        "device_owner": owner}}, headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["port"]["port_security_enabled"] is False


async def test_on_its_own_network_a_tenant_may(client, h):
    net = await h.network("own", headers=TENANT)
    await h.subnet(net["id"], "10.61.0.0/24", headers=TENANT)
    port = await h.port(net["id"], headers=TENANT, port_security_enabled=False, device_owner="anything:else")
    assert port["port_security_enabled"] is False
