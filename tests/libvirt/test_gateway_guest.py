"""A real guest of another project cannot take its shared network's gateway address: the boot that
asks for it (``networks: [{uuid, fixed_ip: <gateway>}]``) and the interface attach that asks for it
are refused before any port exists, and the guest the same project boots there without asking gets
a port of its own project, bound to the libvirt host by the service, and leases an address that
is not the gateway. (A guest that sends from the gateway address anyway is cut off by
anti-spoofing: ``test_spoofing_guest.py`` forges the gateway's address among its frames.)"""

from __future__ import annotations

import pytest

from tests.libvirt.conftest import HOST, wait_console
from tests.noauth import ADMIN

pytestmark = pytest.mark.libvirt

TENANT = {"X-Project-Id": "b" * 32, "X-User-Id": "v" * 32, "X-Roles": "member,reader"}
GATEWAY = "10.83.0.1"


async def test_a_tenants_real_guest_cannot_take_the_shared_networks_gateway(lvcloud):
    cloud = lvcloud
    net = await cloud.make_network(name="lv-gw", cidr="10.83.0.0/24", headers=ADMIN, shared=True)
    cloud.bridges.add("brq" + net["id"][:11])
    server = {"name": "gw-thief", "imageRef": cloud.guest_image["image_id"], "flavorRef": "42"}
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        **server, "networks": [{"uuid": net["id"], "fixed_ip": GATEWAY}]}}, headers=TENANT)
    assert r.status_code == 400 and "gateway" in r.json()["badRequest"]["message"], r.text

    r = await cloud.compute.post("/v2.1/servers", json={"server": {**server, "networks": [{"uuid": net["id"]}]}},
                                 headers=TENANT)
    assert r.status_code == 202, r.text
    sid = r.json()["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120, headers=TENANT)
    (port,) = await cloud.ports(device_id=sid)
    assert port["project_id"] == TENANT["X-Project-Id"] and port["binding:host_id"] == HOST
    (address,) = [f["ip_address"] for f in port["fixed_ips"]]
    assert address != GATEWAY
    await wait_console(cloud, sid, f"NEFOS-IP: {address}/24", timeout=120)

    r = await cloud.compute.post(f"/v2.1/servers/{sid}/os-interface", json={"interfaceAttachment": {
        "net_id": net["id"], "fixed_ips": [{"ip_address": GATEWAY}]}}, headers=TENANT)
    assert r.status_code == 403, r.text  # a chosen address on another project's network: the owner's only
    assert await cloud.ports(network_id=net["id"], fixed_ips=f"ip_address={GATEWAY}") == []
    assert [p["id"] for p in await cloud.ports(device_id=sid)] == [port["id"]]
