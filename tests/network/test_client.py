"""The compute side's NetworkAPI over the in-process bus (Nova's allocate_for_instance)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from nefos import exceptions
from nefos.context import admin_context
from tests.network.conftest import OTHER, PROJECT, member_ctx

CTX = member_ctx(PROJECT)


def instance(host="host-1", az="nova", **extra) -> dict:
    return {"uuid": str(uuid.uuid4()), "project_id": PROJECT, "host": host, "availability_zone": az, **extra}


async def make_net(manager, name="private", cidr="10.0.0.0/24", ctx=CTX, **extra) -> dict:
    net = await manager.create_network(ctx, {"name": name, **extra})
    if cidr:
        await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": cidr, "ip_version": 4,
                                          "dns_nameservers": ["10.0.0.53"]})
    return await manager.get_network(ctx, net["id"])


async def all_ports(manager) -> list[dict]:
    return await manager.list_ports(admin_context())


async def test_allocate_on_requested_network_returns_network_info(api, manager):
    net = await make_net(manager)
    inst = instance()
    (vif,) = await api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}], ["default"])
    port = await manager.get_port(admin_context(), vif["id"])
    assert port["device_id"] == inst["uuid"] and port["device_owner"] == "compute:nova"
    assert port["binding:host_id"] == "host-1" and port["binding:vif_type"] == "bridge"
    assert port["project_id"] == PROJECT and port["status"] == "DOWN"
    default = [g for g in await manager.list_security_groups(CTX) if g["name"] == "default"][0]
    assert port["security_groups"] == [default["id"]]
    assert vif["address"] == port["mac_address"] and vif["type"] == "bridge"
    assert vif["devname"] == "tap" + port["id"][:11] and vif["active"] is False
    assert vif["preserve_on_delete"] is False and vif["vnic_type"] == "normal"
    network = vif["network"]
    assert network["id"] == net["id"] and network["label"] == "private"
    assert network["bridge"] == "brq" + net["id"][:11] and network["mtu"] == 1450  # a VXLAN network: 1500 - 50
    (subnet,) = network["subnets"]
    assert subnet["cidr"] == "10.0.0.0/24" and subnet["gateway"] == "10.0.0.1" and subnet["ip_version"] == 4
    assert subnet["ips"] == [{"address": port["fixed_ips"][0]["ip_address"], "type": "fixed", "version": 4}]
    assert subnet["dns"][0]["address"] == "10.0.0.53"

    await manager.ports.update_port_status(admin_context(), port["id"], "ACTIVE")
    (info,) = await api.get_instance_nw_info(CTX, dict(inst, network_info=[vif]))
    assert info["active"] is True and info["id"] == vif["id"]


async def test_unspecified_network_selection(api, manager):
    inst = instance()
    assert await api.allocate_for_instance(CTX, inst, None, []) == []
    assert await api.allocate_for_instance(CTX, inst, "none", []) == []
    with pytest.raises(exceptions.UnableToAutoAllocateNetwork):
        await api.allocate_for_instance(CTX, inst, "auto", [])
    shared = await make_net(manager, "public", "192.168.0.0/24", ctx=admin_context(), shared=True)
    (vif,) = await api.allocate_for_instance(CTX, inst, "auto", [])
    assert vif["network"]["id"] == shared["id"]
    await make_net(manager, "mine", "10.1.0.0/24")
    with pytest.raises(exceptions.NetworkAmbiguous):
        await api.allocate_for_instance(CTX, instance(), None, [])
    with pytest.raises(exceptions.NetworkAmbiguous):
        await api.validate_networks(CTX, None, 1)
    # another project's private network is neither visible nor usable
    theirs = await make_net(manager, "theirs", "10.2.0.0/24", ctx=member_ctx(OTHER))
    with pytest.raises(exceptions.NetworkNotFound):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": theirs["id"]}], [])


async def test_security_groups_by_name_or_id(api, manager):
    net = await make_net(manager)
    web = await manager.create_security_group(CTX, {"name": "web"})
    db = await manager.create_security_group(CTX, {"name": "db"})
    (vif,) = await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}], ["web", db["id"]])
    port = await manager.get_port(CTX, vif["id"])
    assert sorted(port["security_groups"]) == sorted([web["id"], db["id"]])
    await manager.create_security_group(CTX, {"name": "web"})
    with pytest.raises(exceptions.SecurityGroupAmbiguous):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}], ["web"])
    with pytest.raises(exceptions.SecurityGroupNotFound):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}], ["nope"])
    theirs = await manager.create_security_group(member_ctx(OTHER), {"name": "theirs"})
    with pytest.raises(exceptions.SecurityGroupNotFound):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}], [theirs["id"]])
    assert len(await all_ports(manager)) == 1  # the refused requests created nothing


async def test_requested_port_is_claimed_and_preserved(api, manager):
    net = await make_net(manager)
    mine = await manager.create_port(CTX, {"network_id": net["id"], "name": "mine"})
    inst = instance(requested_networks=[{"port": mine["id"]}])
    (vif,) = await api.allocate_for_instance(CTX, inst, [{"port": mine["id"], "tag": "nic0"}], ["default"])
    assert vif["id"] == mine["id"] and vif["preserve_on_delete"] is True and vif["tag"] == "nic0"
    port = await manager.get_port(admin_context(), mine["id"])
    assert port["device_id"] == inst["uuid"] and port["binding:host_id"] == "host-1"

    with pytest.raises(exceptions.PortInUse):
        await api.validate_networks(CTX, [{"port": mine["id"]}], 1)
    with pytest.raises(exceptions.PortInUse):
        await api.allocate_for_instance(CTX, instance(), [{"port": mine["id"]}], [])
    with pytest.raises(exceptions.PortNotFound):
        await api.allocate_for_instance(CTX, instance(), [{"port": str(uuid.uuid4())}], [])

    # deleting the instance without its network_info still keeps the user's port, unbound
    await api.deallocate_for_instance(CTX, inst, None)
    port = await manager.get_port(admin_context(), mine["id"])
    assert port["device_id"] == "" and port["device_owner"] == "" and port["binding:host_id"] == ""
    assert port["binding:vif_type"] == "unbound"


async def test_two_instances_racing_for_one_port(api, manager):
    net = await make_net(manager)
    port = await manager.create_port(CTX, {"network_id": net["id"]})
    results = await asyncio.gather(*[
        api.allocate_for_instance(CTX, instance(), [{"port": port["id"]}], []) for _ in range(5)],
        return_exceptions=True)
    winners = [r for r in results if isinstance(r, list)]
    assert len(winners) == 1
    assert all(isinstance(r, exceptions.PortInUse) for r in results if not isinstance(r, list))
    owner = (await manager.get_port(admin_context(), port["id"]))["device_id"]
    assert owner and owner != ""


async def test_failure_midway_rolls_back(api, manager):
    """Port 1 is claimed, port 2 created, port 3 fails: 2 is deleted and 1 restored."""
    net_a = await make_net(manager, "a", "10.0.0.0/24")
    net_b = await make_net(manager, "b", "10.9.0.0/24")
    mine = await manager.update_port(
        admin_context(),
        (await manager.create_port(CTX, {"network_id": net_a["id"], "name": "mine"}))["id"],
        {"binding:profile": {"keep": "me"}, "device_owner": "user:thing"})
    blocker = await manager.create_port(CTX, {"network_id": net_b["id"],
                                              "fixed_ips": [{"ip_address": "10.9.0.77"}]})
    before = {p["id"] for p in await all_ports(manager)}
    inst = instance()
    requested = [{"port": mine["id"]}, {"uuid": net_a["id"]}, {"uuid": net_b["id"], "fixed_ip": "10.9.0.77"}]
    with pytest.raises(exceptions.FixedIpAlreadyInUse):
        await api.allocate_for_instance(CTX, inst, requested, ["default"])
    after = await all_ports(manager)
    assert {p["id"] for p in after} == before  # the port made for net a is gone
    restored = await manager.get_port(admin_context(), mine["id"])
    assert restored["device_id"] == "" and restored["device_owner"] == "user:thing"
    assert restored["binding:host_id"] == "" and restored["binding:profile"] == {"keep": "me"}
    assert await manager.list_ports(admin_context(), filters={"device_id": [inst["uuid"]]}) == []
    assert (await manager.get_port(admin_context(), blocker["id"]))["device_id"] == ""


async def test_failure_on_exhausted_subnet_and_on_cancel_rolls_back(api, manager, monkeypatch):
    net = await make_net(manager, "big", "10.0.0.0/24")
    tiny = await make_net(manager, "tiny", "10.5.0.0/30")  # one free address
    await manager.create_port(CTX, {"network_id": tiny["id"]})
    with pytest.raises(exceptions.IpAddressGenerationFailure):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}, {"uuid": tiny["id"]}], [])
    assert len(await all_ports(manager)) == 1

    # a build killed in the middle of the allocation (the task cancelled) leaves no port either
    gate = asyncio.Event()
    real_call = api._call

    async def slow_call(ctx, method, **kwargs):
        result = await real_call(ctx, method, **kwargs)
        if method == "create_port":
            gate.set()
            await asyncio.sleep(30)
        return result
    monkeypatch.setattr(api, "_call", slow_call)
    inst = instance()
    task = asyncio.create_task(api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}], []))
    await gate.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(api, "_call", real_call)
    assert await manager.list_ports(admin_context(), filters={"device_id": [inst["uuid"]]}) == []


async def test_deallocate_is_idempotent_and_finds_ports_by_device(api, manager):
    net = await make_net(manager)
    inst = instance()
    vifs = await api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}, {"uuid": net["id"]}], [])
    assert len(vifs) == 2 and len({v["network"]["subnets"][0]["ips"][0]["address"] for v in vifs}) == 2
    # the compute host died before saving network_info: deallocate finds the ports by device_id
    await api.deallocate_for_instance(CTX, inst, None)
    assert await all_ports(manager) == []
    await api.deallocate_for_instance(CTX, inst, vifs)  # again, with stale network_info: fine
    await api.deallocate_for_instance(CTX, inst, [])


async def test_validate_networks(api, manager, client):
    net = await make_net(manager)
    empty = await make_net(manager, "empty", cidr=None)
    assert await api.validate_networks(CTX, [{"uuid": net["id"]}], 3) == 3
    assert await api.validate_networks(CTX, "none", 7) == 7
    with pytest.raises(exceptions.NetworkNotFound):
        await api.validate_networks(CTX, [{"uuid": str(uuid.uuid4())}], 1)
    with pytest.raises(exceptions.NetworkRequiresSubnet):
        await api.validate_networks(CTX, [{"uuid": empty["id"]}], 1)
    with pytest.raises(exceptions.InvalidIpAddress):
        await api.validate_networks(CTX, [{"uuid": net["id"], "fixed_ip": "10.99.0.5"}], 1)
    port = await manager.create_port(CTX, {"network_id": net["id"]})
    with pytest.raises(exceptions.FixedIpAlreadyInUse):
        await api.validate_networks(CTX, [{"uuid": net["id"], "fixed_ip": port["fixed_ips"][0]["ip_address"]}], 1)
    assert await api.validate_networks(CTX, [{"port": port["id"]}], 1) == 1
    with pytest.raises(exceptions.PortNotFound):
        await api.validate_networks(CTX, [{"port": str(uuid.uuid4())}], 1)

    # the port quota limits how many instances fit: 5 ports allowed, 1 used, 2 per instance
    await manager.update_quota(admin_context(), PROJECT, {"port": 5})
    assert await api.validate_networks(CTX, [{"uuid": net["id"]}, {"uuid": net["id"]}], 10) == 2
    assert await api.validate_networks(CTX, [{"uuid": net["id"]}], 10) == 4
    await manager.update_quota(admin_context(), PROJECT, {"port": -1})
    assert await api.validate_networks(CTX, [{"uuid": net["id"]}], 10) == 10


async def test_external_network_needs_sharing(api, manager):
    ext = await make_net(manager, "ext", "172.16.0.0/24", ctx=admin_context(), **{"router:external": True})
    with pytest.raises(exceptions.ExternalNetworkAttachForbidden):
        await api.validate_networks(CTX, [{"uuid": ext["id"]}], 1)
    with pytest.raises(exceptions.ExternalNetworkAttachForbidden):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": ext["id"]}], [])
    assert await all_ports(manager) == []


async def test_cancel_after_claim_gives_the_users_port_back(api, manager, monkeypatch):
    """The claim went through but its reply never came: the port is restored, not deleted."""
    net = await make_net(manager)
    mine = await manager.create_port(CTX, {"network_id": net["id"]})
    gate = asyncio.Event()
    real_call = api._call

    async def slow_call(ctx, method, **kwargs):
        result = await real_call(ctx, method, **kwargs)
        if method == "update_port" and kwargs.get("expected_device_id") == "":
            gate.set()
            await asyncio.sleep(30)
        return result
    monkeypatch.setattr(api, "_call", slow_call)
    inst = instance()
    task = asyncio.create_task(api.allocate_for_instance(CTX, inst, [{"port": mine["id"]}], []))
    await gate.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    port = await manager.get_port(admin_context(), mine["id"])
    assert port["device_id"] == "" and port["binding:host_id"] == ""
