"""A server create's questions to the network service in one call (network 1.1,
``networks_for_instance``), and the same answers from a network service pinned below 1.1 or older
than it (the Networking API calls that method replaces)."""

from __future__ import annotations

import uuid

import pytest

from nefos import exceptions
from nefos.context import admin_context
from tests.network.conftest import PROJECT, member_ctx
from tests.network.test_client import instance, make_net

CTX = member_ctx(PROJECT)


async def test_a_create_asks_once_to_validate_and_once_to_plan_its_ports(api, manager, calls):
    net = await make_net(manager)
    assert await api.validate_networks(CTX, [{"uuid": net["id"]}], 3) == 3
    assert calls == ["networks_for_instance"]
    calls.clear()
    (vif,) = await api.allocate_for_instance(CTX, instance(), [{"uuid": net["id"]}], ["default"])
    # the new port's subnets came with the networks; a port made now has no floating IP; it is made
    # with the caller's authority and bound to the host with the service's in the same call
    assert calls == ["networks_for_instance", "create_port"]
    (subnet,) = vif["network"]["subnets"]
    assert subnet["cidr"] == "10.0.0.0/24" and len(subnet["ips"]) == 1


async def test_validation_outcomes_whatever_the_network_service_serves(api, manager, peer, calls):
    net = await make_net(manager)
    empty = await make_net(manager, "empty", cidr=None)
    ext = await make_net(manager, "ext", "172.16.0.0/24", ctx=admin_context(), **{"router:external": True})
    free = await manager.create_port(CTX, {"network_id": net["id"]})
    taken = free["fixed_ips"][0]["ip_address"]
    used = await manager.create_port(CTX, {"network_id": net["id"], "device_id": str(uuid.uuid4())})
    missing = str(uuid.uuid4())

    async def outcome(requested, count=1):
        try:
            return await api.validate_networks(CTX, requested, count)
        except exceptions.NefosError as exc:
            return type(exc).__name__

    assert await outcome([{"uuid": net["id"]}], 3) == 3
    assert await outcome("none", 7) == 7
    assert await outcome([{"uuid": missing}]) == "NetworkNotFound"
    assert await outcome([{"uuid": net["id"]}, {"uuid": missing}]) == "NetworkNotFound"
    assert await outcome([{"uuid": empty["id"]}]) == "NetworkRequiresSubnet"
    assert await outcome([{"uuid": ext["id"]}]) == "ExternalNetworkAttachForbidden"
    assert await outcome([{"uuid": net["id"], "fixed_ip": "10.99.0.5"}]) == "InvalidIpForNetwork"
    assert await outcome([{"uuid": net["id"], "fixed_ip": "not-an-address"}]) == "InvalidIpAddress"
    assert await outcome([{"uuid": net["id"], "fixed_ip": taken}]) == "FixedIpAlreadyInUse"
    assert await outcome([{"uuid": net["id"], "fixed_ip": "10.0.0.200"}]) == 1
    assert await outcome([{"port": free["id"]}]) == 1
    assert await outcome([{"port": missing}]) == "PortNotFound"
    assert await outcome([{"port": used["id"]}]) == "PortInUse"
    # the first bad entry of the request is the one reported
    assert await outcome([{"uuid": net["id"], "fixed_ip": "bad"}, {"port": missing}]) == "InvalidIpAddress"
    assert await outcome([{"port": missing}, {"uuid": net["id"], "fixed_ip": "bad"}]) == "PortNotFound"
    assert await outcome([{"port": used["id"]}, {"uuid": missing}]) == "PortInUse"
    # nothing requested: the project's one network (its own and the shared ones), else ambiguous
    assert await outcome(None) == "NetworkAmbiguous"
    assert await outcome("auto") == "NetworkAmbiguous"
    # the port quota: 5 ports, 2 used, 2 per server
    await manager.update_quota(admin_context(), PROJECT, {"port": 5})
    assert await outcome([{"uuid": net["id"]}, {"uuid": net["id"]}], 10) == 1
    assert await outcome([{"uuid": net["id"]}], 10) == 3
    assert await outcome([{"port": free["id"]}], 1) == 1  # a requested port takes no quota
    await manager.update_quota(admin_context(), PROJECT, {"port": 2})
    assert await outcome([{"uuid": net["id"]}], 1) == 0
    assert ("networks_for_instance" in calls) == (peer != "pinned")
    if peer == "pinned":
        assert "get_quota_details" in calls


async def test_auto_allocation_without_networks(api, manager, peer):
    with pytest.raises(exceptions.UnableToAutoAllocateNetwork):
        await api.validate_networks(CTX, "auto", 1)
    assert await api.validate_networks(CTX, None, 4) == 4  # nothing to attach: no port needed
    shared = await make_net(manager, "shared", "10.3.0.0/24", ctx=admin_context(), shared=True)
    await manager.update_quota(admin_context(), PROJECT, {"port": 3})
    assert await api.validate_networks(CTX, "auto", 4) == 3
    (vif,) = await api.allocate_for_instance(CTX, instance(), None, [])
    assert vif["network"]["id"] == shared["id"]
    await make_net(manager, "down", "10.4.0.0/24", admin_state_up=False)
    with pytest.raises(exceptions.NetworkAmbiguous):
        await api.validate_networks(CTX, None, 1)
    # "auto" picks among the project's networks that are up only
    (vif,) = await api.allocate_for_instance(CTX, instance(), "auto", [])
    assert vif["network"]["id"] == shared["id"]


async def test_allocation_whatever_the_network_service_serves(api, manager, peer):
    net = await make_net(manager)
    mine = await manager.create_port(CTX, {"network_id": net["id"]})
    ext = await make_net(manager, "ext", "172.24.4.0/24", ctx=admin_context(), **{"router:external": True})
    router = await manager.create_router(admin_context(), {"name": "r", "project_id": PROJECT,
                                                           "external_gateway_info": {"network_id": ext["id"]}})
    await manager.add_router_interface(admin_context(), router["id"], {"subnet_id": net["subnets"][0]})
    fip = await manager.create_floatingip(CTX, {"floating_network_id": ext["id"], "port_id": mine["id"]})
    inst = instance()
    claimed, made = await api.allocate_for_instance(CTX, inst, [{"port": mine["id"]}, {"uuid": net["id"]}], [])
    assert claimed["id"] == mine["id"] and claimed["preserve_on_delete"] is True
    (ip,) = claimed["network"]["subnets"][0]["ips"]
    assert ip["floating_ips"] == [{"address": fip["floating_ip_address"], "type": "floating", "version": 4}]
    (ip,) = made["network"]["subnets"][0]["ips"]
    assert "floating_ips" not in ip and ip["address"] != mine["fixed_ips"][0]["ip_address"]
    with pytest.raises(exceptions.NetworkNotFound):
        await api.allocate_for_instance(CTX, instance(), [{"uuid": str(uuid.uuid4())}], [])
    assert await api.get_instance_nw_info(CTX, dict(inst, network_info=[claimed, made])) == [claimed, made]
