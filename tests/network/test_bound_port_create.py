"""A server's new port is made with the caller's authority and bound to its host with the service's
in one call to the network service (network 1.2, ``create_port(binding_host_id)``: one message, one
transaction), as Nova makes it with the user's token and binds it with its admin client. The binding
argument takes none of the caller's checks away: everything in the port's body is still the
caller's to ask for. A network service pinned below 1.2, or older than it, gets the create and an
admin's update of the binding, with the same port in the end."""

from __future__ import annotations

import pytest

from nefos import exceptions
from nefos.context import admin_context
from nefos.control.network import provisioning
from tests.network.conftest import OTHER, PROJECT, member, member_ctx
from tests.network.test_client import instance, make_net

CTX = member_ctx(PROJECT)
OWNER = member_ctx(OTHER)
HOST = "host-1"


def _binding_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c in ("create_port", "update_port", "delete_port")]


# What the client sends to make and bind a port: one call; a create and an admin's update when
# pinned below 1.2; the same after the refusal of the 1.2 form by a network service not serving it
# (refused before it ran, it made nothing).
BINDING_CALLS = {"current": ["create_port"], "pinned": ["create_port", "update_port"],
                 "older": ["create_port", "create_port", "update_port"]}


async def _the_instances_port(manager, instance_uuid: str, port_id: str) -> dict:
    ports = await manager.list_ports(admin_context(), filters={"device_id": [instance_uuid]})
    (port,) = [p for p in ports if p["id"] == port_id]
    return port


def _bound_as_the_callers(port: dict, vif: dict) -> None:
    assert port["project_id"] == PROJECT and port["device_owner"] == "compute:nova"
    assert port["binding:host_id"] == HOST and port["binding:vif_type"] == "bridge"
    assert port[provisioning.ATTRIBUTE].get(provisioning.L2) == "pending"  # the host's L2 agent wires it
    # the compute host waits for the plug event its binding names
    assert vif["type"] == "bridge" and vif["details"] == port["binding:vif_details"]
    assert vif["details"]["vif_plugged_event"] == "plug"


async def test_a_servers_new_port_is_made_and_bound_in_one_call(api, manager, peer, calls):
    net = await make_net(manager)
    inst = instance(host=HOST)
    (vif,) = await api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}], [])
    assert _binding_calls(calls) == BINDING_CALLS[peer]
    _bound_as_the_callers(await _the_instances_port(manager, inst["uuid"], vif["id"]), vif)


async def test_an_attached_interfaces_new_port_is_made_and_bound_in_one_call(api, manager, peer, calls):
    net = await make_net(manager)
    inst = instance(host=HOST)
    await api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}], [])
    calls.clear()
    vif = await api.allocate_port_for_instance(CTX, inst, network_id=net["id"])
    assert _binding_calls(calls) == BINDING_CALLS[peer]
    _bound_as_the_callers(await _the_instances_port(manager, inst["uuid"], vif["id"]), vif)


async def test_a_port_for_a_server_not_on_a_host_yet_is_made_unbound(api, manager, calls):
    net = await make_net(manager)
    inst = instance(host=None)
    (vif,) = await api.allocate_for_instance(CTX, inst, [{"uuid": net["id"]}], [])
    assert _binding_calls(calls) == ["create_port"]
    port = await _the_instances_port(manager, inst["uuid"], vif["id"])
    assert port["binding:host_id"] == "" and port["binding:vif_type"] == "unbound"


@pytest.fixture
async def shared(manager) -> dict:
    """Another project's network, shared with every project (sharing is an admin's act)."""
    net = await manager.create_network(admin_context(), {"name": "shared", "shared": True, "project_id": OTHER})
    await manager.create_subnet(OWNER, {"network_id": net["id"], "cidr": "10.70.0.0/24", "ip_version": 4})
    return await manager.get_network(admin_context(), net["id"])


async def test_the_binding_argument_takes_none_of_the_callers_checks_away(api, manager, shared):
    """As a member of a second project, over the bus, each body the Networking API would refuse
    it, sent with the binding argument: the same refusal, and nothing made."""
    external = await make_net(manager, "ext", "172.24.9.0/24", ctx=admin_context(), **{"router:external": True})
    others_group = await manager.create_security_group(OWNER, {"name": "theirs"})
    device = {"device_id": "d" * 32, "device_owner": "compute:nova"}
    on_shared = {"network_id": shared["id"], **device}
    refused = {
        "a chosen address on another project's network": (
            {**on_shared, "fixed_ips": [{"ip_address": "10.70.0.50"}]}, exceptions.PolicyNotAuthorized),
        "the shared subnet's gateway": (
            {**on_shared, "fixed_ips": [{"ip_address": "10.70.0.1"}]}, exceptions.PolicyNotAuthorized),
        "a chosen MAC on another project's network": (
            {**on_shared, "mac_address": "fa:16:3e:00:00:01"}, exceptions.PolicyNotAuthorized),
        "anti-spoofing lifted on another project's network": (
            {**on_shared, "port_security_enabled": False}, exceptions.PolicyNotAuthorized),
        "a network:* owner": (
            {**on_shared, "device_owner": "network:dhcp"}, exceptions.PolicyNotAuthorized),
        "an external network not shared with it": (
            {"network_id": external["id"], **device}, exceptions.PolicyNotAuthorized),
        "another project's security group": (
            {**on_shared, "security_groups": [others_group["id"]]}, exceptions.SecurityGroupNotFound),
        "another project as the port's owner": (
            {**on_shared, "project_id": OTHER}, exceptions.ValidationError),
        "a binding in the body": (
            {**on_shared, "binding:host_id": "elsewhere"}, exceptions.PolicyNotAuthorized),
    }
    before = await manager.list_ports(admin_context())
    for what, (body, error) in refused.items():
        with pytest.raises(error):
            await api.client.call(CTX, "create_port", port=body, binding_host_id=HOST)
        assert await manager.list_ports(admin_context()) == before, what
    # the owner may choose an address on its network, never the gateway, whoever binds the port
    with pytest.raises(exceptions.InvalidIpForSubnet):
        await api.client.call(OWNER, "create_port", port={**on_shared, "fixed_ips": [{"ip_address": "10.70.0.1"}]},
                              binding_host_id=HOST)
    # the caller's project's quota counts the port
    await manager.update_quota(admin_context(), PROJECT, {"port": 0})
    with pytest.raises(exceptions.OverQuota):
        await api.client.call(CTX, "create_port", port=on_shared, binding_host_id=HOST)
    assert await manager.list_ports(admin_context()) == before
    await manager.update_quota(admin_context(), PROJECT, {"port": 1})
    port = await api.client.call(CTX, "create_port", port=on_shared, binding_host_id=HOST)
    assert port["project_id"] == PROJECT and port["binding:host_id"] == HOST
    assert (await manager.get_quota_details(admin_context(), PROJECT))["port"]["used"] == 1


async def test_the_networking_api_has_no_binding_argument(client, shared):
    """Only the compute side sends the argument, over the bus; a member asking the REST API to bind
    its port is refused as before (an admin's attribute), and the argument is no attribute at all."""
    for body, status in (({"binding:host_id": HOST}, 403), ({"binding_host_id": HOST}, 400)):
        r = await client.post("/v2.0/ports", json={"port": {"network_id": shared["id"], **body}},
                              headers=member(PROJECT))
        assert r.status_code == status, r.text
        assert "NeutronError" in r.json()
