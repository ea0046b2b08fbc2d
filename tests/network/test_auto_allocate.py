"""The auto-allocated topology (Neutron's auto-allocated-topology extension) through the Networking
API and the compute side's networks "auto": the default external network (``is_default``), the
topology built once per project, the dry run, project isolation, deletion, and concurrent builds."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from nefos import exceptions
from tests.network.conftest import OTHER, PROJECT, Helpers, member, member_ctx
from tests.network.l3_helpers import external_network, put, tenant_network
from tests.noauth import ADMIN

READER = {"X-Project-Id": PROJECT, "X-User-Id": "r" * 32, "X-Roles": "reader"}
TOPOLOGY = "/v2.0/auto-allocated-topology"


@pytest.fixture
def h(client):
    return Helpers(client)


async def _default_external(h: Helpers) -> dict:
    ext, _ = await external_network(h)
    return await put(h, f"/v2.0/networks/{ext['id']}", {"network": {"is_default": True}})


async def test_is_default_on_external_networks_only(h, client):
    ext = (await _default_external(h))["network"]
    assert ext["is_default"] is True
    net, _ = await tenant_network(h)
    assert "is_default" not in net  # Neutron extends external networks only
    # one default at a time
    other = await h.network("public2", **{"router:external": True})
    assert other["is_default"] is False
    r = await client.put(f"/v2.0/networks/{other['id']}", json={"network": {"is_default": True}})
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "DefaultExternalNetworkExists"
    r = await client.post("/v2.0/networks", json={"network": {"router:external": True, "is_default": True}})
    assert r.status_code == 409
    # the admin's attribute
    r = await client.put(f"/v2.0/networks/{net['id']}", json={"network": {"is_default": True}}, headers=member())
    assert r.status_code == 403
    # no longer external: no longer the default
    plain = await put(h, f"/v2.0/networks/{ext['id']}", {"network": {"router:external": False}})
    assert "is_default" not in plain["network"]
    assert (await put(h, f"/v2.0/networks/{other['id']}", {"network": {"is_default": True}}))["network"]["is_default"]
    listed = (await client.get("/v2.0/networks?is_default=True")).json()["networks"]
    assert [n["id"] for n in listed] == [other["id"]]


async def test_topology_built_once_and_shown(h, client):
    ext = (await _default_external(h))["network"]
    _, mine = await tenant_network(h, "10.128.0.0/26")  # the pool's first block is taken: skipped
    r = await client.get(f"{TOPOLOGY}/{PROJECT}", headers=member())
    assert r.status_code == 200, r.text
    topology = r.json()["auto_allocated_topology"]
    assert topology["project_id"] == topology["tenant_id"] == PROJECT
    net = (await client.get(f"/v2.0/networks/{topology['id']}", headers=member())).json()["network"]
    assert net["name"] == "auto_allocated_network" and net["admin_state_up"] and net["project_id"] == PROJECT
    [subnet_id] = net["subnets"]
    subnet = (await client.get(f"/v2.0/subnets/{subnet_id}", headers=member())).json()["subnet"]
    assert subnet["name"] == "auto_allocated_subnet_v4"
    cidr = ipaddress.ip_network(subnet["cidr"])
    assert cidr.subnet_of(ipaddress.ip_network("10.128.0.0/16")) and cidr.prefixlen == 26
    assert not cidr.overlaps(ipaddress.ip_network(mine["cidr"]))
    [router] = (await client.get("/v2.0/routers", headers=member())).json()["routers"]
    assert router["name"] == "auto_allocated_router" and router["external_gateway_info"]["network_id"] == ext["id"]
    ports = (await client.get(f"/v2.0/ports?device_id={router['id']}&network_id={net['id']}")).json()["ports"]
    assert [p["device_owner"] for p in ports] == ["network:router_interface"]
    # idempotent: the same network, for the project's reader, for the admin, for "None"
    for headers, project in ((READER, PROJECT), (ADMIN, PROJECT), (member(), "None")):
        again = (await client.get(f"{TOPOLOGY}/{project}", headers=headers)).json()["auto_allocated_topology"]
        assert again == topology
    # another project's own topology does not overlap this one
    theirs = (await client.get(f"{TOPOLOGY}/{OTHER}", headers=member(OTHER))).json()["auto_allocated_topology"]
    their_net = (await client.get(f"/v2.0/networks/{theirs['id']}")).json()["network"]
    their_cidr = (await client.get(f"/v2.0/subnets/{their_net['subnets'][0]}")).json()["subnet"]["cidr"]
    assert not ipaddress.ip_network(their_cidr).overlaps(cidr)


async def test_dry_run_and_bad_fields(h, client):
    r = await client.get(f"{TOPOLOGY}/{PROJECT}?fields=dry-run", headers=member())
    assert r.status_code == 409
    assert r.json()["NeutronError"] == {"type": "AutoAllocationFailure", "detail": "",
                                        "message": "Deployment error: No default router:external network."}
    assert (await client.get(f"{TOPOLOGY}/{PROJECT}", headers=member())).status_code == 409
    await _default_external(h)
    r = await client.get(f"{TOPOLOGY}/{PROJECT}?fields=dry-run", headers=member())
    assert r.json() == {"auto_allocated_topology": {"id": "dry-run=pass", "tenant_id": PROJECT,
                                                    "project_id": PROJECT}}
    assert (await client.get("/v2.0/networks", headers=member())).json()["networks"][0]["router:external"]
    r = await client.get(f"{TOPOLOGY}/{PROJECT}?fields=id", headers=member())
    assert r.status_code == 400
    assert r.json()["NeutronError"]["message"] == "Bad auto_allocate request: Unrecognized field."


async def test_project_isolation(h, client):
    await _default_external(h)
    for method in ("GET", "DELETE"):
        r = await client.request(method, f"{TOPOLOGY}/{OTHER}", headers=member())
        assert r.status_code == 403 and r.json()["NeutronError"]["message"] == "Not authorized."
    r = await client.delete(f"{TOPOLOGY}/{PROJECT}", headers=READER)
    assert r.status_code == 403
    assert (await client.get("/v2.0/networks", headers=member(OTHER))).json()["networks"][0]["router:external"]


async def test_delete(h, client):
    await _default_external(h)
    topology = (await client.get(f"{TOPOLOGY}/{PROJECT}", headers=member())).json()["auto_allocated_topology"]
    guest = await h.port(topology["id"], member(), device_id="vm", device_owner="compute:nova")
    r = await client.delete(f"{TOPOLOGY}/{PROJECT}", headers=member())
    assert r.status_code == 409 and r.json()["NeutronError"]["type"] == "NetworkInUse"
    assert (await client.get(f"/v2.0/networks/{topology['id']}")).status_code == 200  # nothing removed
    assert len((await client.get("/v2.0/routers", headers=member())).json()["routers"]) == 1
    assert (await client.delete(f"/v2.0/ports/{guest['id']}", headers=member())).status_code == 204
    assert (await client.delete(f"{TOPOLOGY}/{PROJECT}", headers=member())).status_code == 204
    assert (await client.get(f"/v2.0/networks/{topology['id']}")).status_code == 404
    assert (await client.get("/v2.0/routers", headers=member())).json()["routers"] == []
    assert (await client.delete(f"{TOPOLOGY}/{PROJECT}", headers=member())).status_code == 204  # none: fine
    rebuilt = (await client.get(f"{TOPOLOGY}/{PROJECT}", headers=member())).json()["auto_allocated_topology"]
    assert rebuilt["id"] != topology["id"]


async def test_concurrent_builds_make_one_topology(h, client, manager):
    await _default_external(h)
    results = await asyncio.gather(*[manager.get_auto_allocated_topology(member_ctx(), PROJECT) for _ in range(4)])
    assert len({r["id"] for r in results}) == 1
    nets = (await client.get("/v2.0/networks", headers=member())).json()["networks"]
    assert [n["id"] for n in nets if not n["router:external"]] == [results[0]["id"]]


async def test_extension_listed(client):
    r = await client.get("/v2.0/extensions/auto-allocated-topology")
    assert r.status_code == 200 and r.json()["extension"]["name"] == "Auto Allocated Topology Services"


# The compute side: Nova's networks "auto" ------------------------------------------------------------

async def test_auto_uses_the_topology_when_the_project_has_no_network(h, client, api):
    ctx = member_ctx()
    with pytest.raises(exceptions.UnableToAutoAllocateNetwork):
        await api.validate_networks(ctx, "auto", 1)
    await _default_external(h)
    assert await api.validate_networks(ctx, "auto", 3) == 3
    vifs = []
    for n in range(3):
        vifs += await api.allocate_for_instance(ctx, {"uuid": f"vm-{n}", "project_id": PROJECT, "host": "h1"},
                                                "auto", [])
    assert len({v["network"]["id"] for v in vifs}) == 1
    topology = (await client.get(f"{TOPOLOGY}/{PROJECT}", headers=member())).json()["auto_allocated_topology"]
    assert vifs[0]["network"]["id"] == topology["id"]


async def test_auto_uses_the_project_network_when_there_is_one(h, api):
    await _default_external(h)
    net, _ = await tenant_network(h)
    [vif] = await api.allocate_for_instance(member_ctx(), {"uuid": "vm", "project_id": PROJECT, "host": "h1"},
                                            "auto", [])
    assert vif["network"]["id"] == net["id"]
