"""Nova's floating-IP server actions (``addFloatingIp`` / ``removeFloatingIp``, 2.1 to 2.43) through the
whole cloud (fake driver): the floating IPs are the Networking API's, made there with an external
network and a router as a user would; Nova's answers for the errors; the policy; 404 from 2.44."""

from __future__ import annotations

import pytest

from tests.clouds import ADMIN, member, start_cloud, stop_cloud

OTHER = member(project="b" * 32, user="v" * 32)
READER = {**member(), "X-Roles": "reader"}


def v(version: str, headers: dict | None = None) -> dict:
    return {**(headers or member()), "OpenStack-API-Version": f"compute {version}"}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1)
    yield harness
    await stop_cloud(harness)


async def _post(cloud, path: str, body: dict, headers=None, expect: int = 201) -> dict:
    r = await cloud.network.post(path, json=body, headers=headers or member())
    assert r.status_code == expect, r.text
    return r.json()


async def _put(cloud, path: str, body: dict, headers=None) -> dict:
    r = await cloud.network.put(path, json=body, headers=headers or member())
    assert r.status_code == 200, r.text
    return r.json()


async def _wired(cloud) -> dict:
    """An external network (admin's), the demo project's network with a router to it."""
    ext = (await _post(cloud, "/v2.0/networks", {"network": {"name": "public", "router:external": True}},
                       ADMIN))["network"]
    await _post(cloud, "/v2.0/subnets", {"subnet": {
        "network_id": ext["id"], "cidr": "172.24.4.0/24", "ip_version": 4, "enable_dhcp": False,
        "gateway_ip": "172.24.4.1", "allocation_pools": [{"start": "172.24.4.10", "end": "172.24.4.250"}]}}, ADMIN)
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    subnet = (await cloud.network.get("/v2.0/subnets", params={"network_id": net["id"]})).json()["subnets"][0]
    router = (await _post(cloud, "/v2.0/routers", {"router": {
        "name": "r", "external_gateway_info": {"network_id": ext["id"]}}}))["router"]
    await _put(cloud, f"/v2.0/routers/{router['id']}/add_router_interface", {"subnet_id": subnet["id"]})
    return {"ext": ext, "net": net, "router": router}


async def _fip(cloud, ext: dict, headers=None) -> dict:
    return (await _post(cloud, "/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"]}},
                        headers))["floatingip"]


async def _server(cloud, net: dict, name="vm", headers=None) -> tuple[str, str]:
    sid = (await cloud.boot(name=name, networks=[{"uuid": net["id"]}], headers=headers or member()))["server"]["id"]
    server = await cloud.wait_status(sid, "ACTIVE", headers=headers or member())
    (addr,) = [a["addr"] for addrs in server["addresses"].values() for a in addrs]
    return sid, addr


async def _action(cloud, sid: str, body: dict, expect: int, headers=None, version="2.43") -> dict:
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=body, headers=v(version, headers))
    assert r.status_code == expect, r.text
    return r.json() if r.content else {}


async def _shown(cloud, fip: dict) -> dict:
    return (await cloud.network.get(f"/v2.0/floatingips/{fip['id']}")).json()["floatingip"]


async def _port_of(cloud, sid: str) -> str:
    (port,) = await cloud.ports(device_id=sid)
    return port["id"]


async def test_add_then_remove(cloud):
    w = await _wired(cloud)
    sid, fixed = await _server(cloud, w["net"])
    fip = await _fip(cloud, w["ext"])
    address = fip["floating_ip_address"]
    assert await _action(cloud, sid, {"addFloatingIp": {"address": address}}, 202) == {}
    shown = await _shown(cloud, fip)
    assert (shown["port_id"], shown["fixed_ip_address"], shown["router_id"], shown["status"]) == (
        await _port_of(cloud, sid), fixed, w["router"]["id"], "ACTIVE")
    # Again with the fixed address named: the same association, accepted.
    await _action(cloud, sid, {"addFloatingIp": {"address": address, "fixed_address": fixed}}, 202)
    assert (await _shown(cloud, fip))["fixed_ip_address"] == fixed
    assert await _action(cloud, sid, {"removeFloatingIp": {"address": address}}, 202) == {}
    shown = await _shown(cloud, fip)
    assert shown["port_id"] is None and shown["fixed_ip_address"] is None and shown["status"] == "DOWN"
    # Not (any more) on the server: 409, as Nova.
    r = await _action(cloud, sid, {"removeFloatingIp": {"address": address}}, 409)
    assert r["conflictingRequest"]["message"] == f"Floating IP {address} is not associated with instance {sid}."


async def test_associated_with_another_server_moves_as_in_nova(cloud):
    w = await _wired(cloud)
    first, _ = await _server(cloud, w["net"], "first")
    second, fixed = await _server(cloud, w["net"], "second")
    fip = await _fip(cloud, w["ext"])
    address = fip["floating_ip_address"]
    await _action(cloud, first, {"addFloatingIp": {"address": address}}, 202)
    await _action(cloud, second, {"addFloatingIp": {"address": address}}, 202)  # Neutron moves it
    shown = await _shown(cloud, fip)
    assert (shown["port_id"], shown["fixed_ip_address"]) == (await _port_of(cloud, second), fixed)
    # No longer on the first server: removing it there is a 409, and it stays on the second.
    await _action(cloud, first, {"removeFloatingIp": {"address": address}}, 409)
    assert (await _shown(cloud, fip))["port_id"] == await _port_of(cloud, second)


async def test_nova_errors(cloud):
    w = await _wired(cloud)
    sid, fixed = await _server(cloud, w["net"])
    fip = await _fip(cloud, w["ext"])
    address = fip["floating_ip_address"]
    # An unknown floating IP (or one the caller cannot see): 404.
    r = await _action(cloud, sid, {"addFloatingIp": {"address": "172.24.4.251"}}, 404)
    assert r == {"itemNotFound": {"code": 404, "message": "floating IP not found"}}
    await _action(cloud, sid, {"removeFloatingIp": {"address": "172.24.4.251"}}, 404)
    theirs = await _fip(cloud, w["ext"], OTHER)
    await _action(cloud, sid, {"addFloatingIp": {"address": theirs["floating_ip_address"]}}, 404)
    # A fixed address the server does not hold: 400.
    r = await _action(cloud, sid, {"addFloatingIp": {"address": address, "fixed_address": "10.0.0.250"}}, 400)
    assert r["badRequest"]["message"] == "Specified fixed address not assigned to instance"
    # That fixed address has a floating IP on that network already: Neutron's 409, Nova's 400.
    await _action(cloud, sid, {"addFloatingIp": {"address": address}}, 202)
    other = await _fip(cloud, w["ext"])
    r = await _action(cloud, sid, {"addFloatingIp": {"address": other["floating_ip_address"]}}, 400)
    assert r["badRequest"]["message"].startswith(
        f"Unable to associate floating IP {other['floating_ip_address']} to fixed IP {fixed} for instance {sid}.")
    assert (await _shown(cloud, other))["port_id"] is None
    # A server with no network: 400.
    bare = (await cloud.boot(name="bare", networks="none", headers=v("2.37")))["server"]["id"]
    await cloud.wait_status(bare, "ACTIVE", headers=member())
    r = await _action(cloud, bare, {"addFloatingIp": {"address": other["floating_ip_address"]}}, 400)
    assert r["badRequest"]["message"] == "Instance network is not ready yet"
    # Another project's server: 404 before anything else.
    await _action(cloud, sid, {"addFloatingIp": {"address": address}}, 404, headers=OTHER)
    await _action(cloud, sid, {"removeFloatingIp": {"address": address}}, 404, headers=OTHER)


async def test_a_router_is_needed(cloud):
    w = await _wired(cloud)
    lonely = await cloud.make_network("lonely", "10.9.0.0/24", headers=member())
    sid, fixed = await _server(cloud, lonely)
    fip = await _fip(cloud, w["ext"])
    r = await _action(cloud, sid, {"addFloatingIp": {"address": fip["floating_ip_address"]}}, 400)
    assert "is not reachable from subnet" in r["badRequest"]["message"], r


@pytest.mark.parametrize("body", [
    {"addFloatingIp": {}},
    {"addFloatingIp": {"address": ""}},
    {"addFloatingIp": {"address": "not-an-ip"}},
    {"addFloatingIp": {"address": "172.24.4.10", "fixed_address": "x"}},
    {"addFloatingIp": {"address": "172.24.4.10", "other": 1}},
    {"addFloatingIp": None},
    {"removeFloatingIp": {}},
    {"removeFloatingIp": {"address": "172.24.4.10", "fixed_address": "10.0.0.3"}},
    {"removeFloatingIp": "172.24.4.10"},
])
async def test_bad_bodies_are_400(cloud, body):
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    sid, _ = await _server(cloud, net)
    await _action(cloud, sid, body, 400)


async def test_policy_and_microversions(cloud):
    w = await _wired(cloud)
    sid, _ = await _server(cloud, w["net"])
    fip = await _fip(cloud, w["ext"])
    address = fip["floating_ip_address"]
    for name in ("addFloatingIp", "removeFloatingIp"):
        r = await _action(cloud, sid, {name: {"address": address}}, 403, headers=READER)
        rule = "os_compute_api:os-floating-ips:" + ("add" if name == "addFloatingIp" else "remove")
        assert rule in r["forbidden"]["message"], r
        # Nova dropped both at 2.44: 404 there, whatever the body.
        r = await _action(cloud, sid, {name: {"address": address}}, 404, version="2.44")
        assert r == {"itemNotFound": {"code": 404, "message": "The resource could not be found."}}
    # An admin may, on any project's server (the floating IP is the demo project's).
    await _action(cloud, sid, {"addFloatingIp": {"address": address}}, 202, headers=ADMIN, version="2.1")
    assert (await _shown(cloud, fip))["port_id"] == await _port_of(cloud, sid)
    await _action(cloud, sid, {"removeFloatingIp": {"address": address}}, 202, headers=ADMIN, version="2.1")
    assert (await _shown(cloud, fip))["port_id"] is None


async def test_remove_fixed_ip_keeps_the_address_a_floating_ip_points_at(cloud):
    """Freed, the address would go to the next port (any project's), the floating IP's traffic with
    it: Neutron refuses the port update (``prevent_internal_ip_change_for_fip``), and the server's
    removeFixedIp with it; disassociated first, the address goes."""
    wired = await _wired(cloud)
    sid, fixed = await _server(cloud, wired["net"])
    fip = await _fip(cloud, wired["ext"])
    await _action(cloud, sid, {"addFloatingIp": {"address": fip["floating_ip_address"]}}, 202)
    body = await _action(cloud, sid, {"removeFixedIp": {"address": fixed}}, 400)
    assert "associated to a floating ip" in body["badRequest"]["message"], body
    (port,) = await cloud.ports(device_id=sid)
    assert [f["ip_address"] for f in port["fixed_ips"]] == [fixed]
    assert (await _shown(cloud, fip))["fixed_ip_address"] == fixed
    await _action(cloud, sid, {"removeFloatingIp": {"address": fip["floating_ip_address"]}}, 202)
    await _action(cloud, sid, {"removeFixedIp": {"address": fixed}}, 202)
    (port,) = await cloud.ports(device_id=sid)
    assert port["fixed_ips"] == []
