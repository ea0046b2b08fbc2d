"""A floating IP associated with a server's port shows in the server's addresses (type
``floating``, after the fixed address it reaches) and in its metadata's ``public-ipv4``, and goes
when it is disassociated or deleted: the network service tells the compute host
``network-changed`` for the port, as Neutron tells Nova, and the host refreshes that port."""

from __future__ import annotations

import asyncio
import time

from nefos.objects import instance as instance_obj
from nefos.model.instance_metadata import InstanceMetadata
from tests.clouds import ADMIN


async def _addresses(cloud, server_id: str) -> list[tuple[str, str]]:
    server = await cloud.server(server_id)
    return [(a["addr"], a["OS-EXT-IPS:type"]) for a in server["addresses"]["private"]]


async def _wait_addresses(cloud, server_id: str, wanted: list[tuple[str, str]], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while (found := await _addresses(cloud, server_id)) != wanted:
        assert time.monotonic() < deadline, f"addresses {found}, not {wanted}"
        await asyncio.sleep(0.05)


async def _post(cloud, path: str, body: dict) -> dict:
    r = await cloud.network.post(path, json=body, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()


async def _put(cloud, path: str, body: dict) -> dict:
    r = await cloud.network.put(path, json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()


async def test_floating_ips_show_in_the_server_s_addresses(cloud):
    ext = (await _post(cloud, "/v2.0/networks", {"network": {"name": "public", "router:external": True}}))["network"]
    await _post(cloud, "/v2.0/subnets", {"subnet": {
        "network_id": ext["id"], "cidr": "172.24.4.0/24", "ip_version": 4, "enable_dhcp": False,
        "gateway_ip": "172.24.4.1", "allocation_pools": [{"start": "172.24.4.10", "end": "172.24.4.250"}]}})
    net = await cloud.make_network()
    (subnet,) = (await cloud.network.get("/v2.0/subnets", params={"network_id": net["id"]},
                                         headers=ADMIN)).json()["subnets"]
    router = (await _post(cloud, "/v2.0/routers", {"router": {
        "name": "r", "external_gateway_info": {"network_id": ext["id"]}}}))["router"]
    await _put(cloud, f"/v2.0/routers/{router['id']}/add_router_interface", {"subnet_id": subnet["id"]})
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    (port,) = await cloud.ports(device_id=sid)
    fixed = port["fixed_ips"][0]["ip_address"]
    assert await _addresses(cloud, sid) == [(fixed, "fixed")]

    fip = (await _post(cloud, "/v2.0/floatingips", {"floatingip": {"floating_network_id": ext["id"]}}))["floatingip"]
    address = fip["floating_ip_address"]
    await _put(cloud, f"/v2.0/floatingips/{fip['id']}", {"floatingip": {"port_id": port["id"]}})
    await _wait_addresses(cloud, sid, [(fixed, "fixed"), (address, "floating")])
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/ips", headers=ADMIN)
    assert [a["addr"] for a in r.json()["addresses"]["private"]] == [fixed, address], r.text
    md = InstanceMetadata(await instance_obj.get(cloud.cloud.rt.db, sid))
    assert md.floating_ips() == [address]

    await _put(cloud, f"/v2.0/floatingips/{fip['id']}", {"floatingip": {"port_id": None}})
    await _wait_addresses(cloud, sid, [(fixed, "fixed")])

    # Created already associated, then deleted.
    fip = (await _post(cloud, "/v2.0/floatingips", {"floatingip": {
        "floating_network_id": ext["id"], "port_id": port["id"]}}))["floatingip"]
    await _wait_addresses(cloud, sid, [(fixed, "fixed"), (fip["floating_ip_address"], "floating")])
    r = await cloud.network.delete(f"/v2.0/floatingips/{fip['id']}", headers=ADMIN)
    assert r.status_code == 204, r.text
    await _wait_addresses(cloud, sid, [(fixed, "fixed")])
