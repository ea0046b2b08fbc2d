"""os-interface on a real guest: a second NIC hot-plugged into a running domain (the L2 agent wires
its tap, the port goes ACTIVE before the attach answers, the guest leases the port's address on
it), then hot-unplugged (the guest sees it go)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from nefos.host.virt.libvirt import config as vconfig
from tests.libvirt.conftest import avirsh, make_network, wait_console

pytestmark = pytest.mark.libvirt


async def _until(predicate, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.1)


async def test_attach_then_detach_a_second_nic(lvcloud):
    cloud = lvcloud
    first = await make_network(cloud, name="lv-if-1", cidr="10.81.0.0/24")
    second = await make_network(cloud, name="lv-if-2", cidr="10.82.0.0/24")
    sid = (await cloud.boot(name="two-nics", flavor="42", networks=[{"uuid": first["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=60)
    await wait_console(cloud, sid, "NEFOS-IP: 10.81.0.")  # booted: its kernel answers hot-plug requests

    r = await cloud.compute.post(f"/v2.1/servers/{sid}/os-interface",
                                 json={"interfaceAttachment": {"net_id": second["id"]}})
    assert r.status_code == 200, r.text
    attached = r.json()["interfaceAttachment"]
    assert attached["net_id"] == second["id"] and attached["port_state"] == "ACTIVE"
    tap = "tap" + attached["port_id"][:11]
    live = await avirsh("dumpxml", sid)
    assert vconfig.has_interface(live, attached["mac_addr"]) and f"dev='{tap}'" in live
    assert attached["port_id"] in [p["id"] for p in vconfig.ports_from_xml(live)]  # the metadata knows its tap
    assert vconfig.has_interface(await avirsh("dumpxml", "--inactive", sid), attached["mac_addr"])  # kept over a restart
    # The L2 agent wired the new tap into the second network's bridge.
    assert os.path.realpath(f"/sys/class/net/{tap}/master").endswith("brq" + second["id"][:11])
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/ips")
    assert "lv-if-2" in r.json()["addresses"]
    # The guest noticed the new NIC and leased the port's fixed IP on it over DHCP.
    fixed_ip = attached["fixed_ips"][0]["ip_address"]
    out = await wait_console(cloud, sid, f"NEFOS-IP: {fixed_ip}/24 on eth1")
    assert f"NEFOS-NET: eth1 added ({attached['mac_addr']})" in out, out[-1500:]

    r = await cloud.compute.delete(f"/v2.1/servers/{sid}/os-interface/{attached['port_id']}")
    assert r.status_code == 202, r.text

    async def unplugged():
        return not vconfig.has_interface(await avirsh("dumpxml", sid), attached["mac_addr"])

    async def port_gone():
        return (await cloud.network.get(f"/v2.0/ports/{attached['port_id']}")).status_code == 404
    await _until(unplugged, what="the guest released the NIC")
    await _until(port_gone, what="the port was deleted")
    assert not vconfig.has_interface(await avirsh("dumpxml", "--inactive", sid), attached["mac_addr"])
    assert not os.path.exists(f"/sys/class/net/{tap}")
    await wait_console(cloud, sid, "NEFOS-NET: eth1 removed")  # the guest saw its NIC go
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-interface")
    assert [i["net_id"] for i in r.json()["interfaceAttachments"]] == [first["id"]]
    assert (await cloud.server(sid))["status"] == "ACTIVE"
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}")
    assert r.status_code == 204
    await cloud.wait_gone(sid, timeout=30)
