"""A router's ports are bound to the host of the L3 agent that serves it (Neutron's
``sync_routers`` binds a legacy router's interface and gateway ports to the agent's host), so L2
population gives the compute hosts the router's MAC and address at that host's VTEP, and that host
the guests'."""

from __future__ import annotations

import asyncio

from nefos.bus import Endpoint, interfaces
from nefos.context import admin_context
from nefos.control.network import l2pop
from nefos.control.network.agent_rpc import AgentStateCallbacks
from nefos.clients.network_agents import L2_AGENT, L2_AGENT_TOPIC
from nefos.control.network.l3_rpc import L3PluginEndpoint
from tests.network.conftest import member
from tests.network.l3_helpers import external_network, put, router, tenant_network

NETWORK_NODE, COMPUTE = "netnode", "compute1"
VTEPS = {NETWORK_NODE: "192.0.2.5", COMPUTE: "192.0.2.2"}


class FdbRecorder(Endpoint):
    """A compute host's L2 agent as L2 population's fanout sees it."""

    rpc_interface = interfaces.L2_AGENT

    def __init__(self):
        self.changed: list[list[str] | None] = []
        self.event = asyncio.Event()

    async def fdb_changed(self, ctx, network_ids=None) -> None:
        self.changed.append(network_ids)
        self.event.set()

    async def port_update(self, ctx, port_id: str) -> None:
        """(A port's admin_state_up changed: nothing the forwarding entries record.)"""


async def _topology(h, manager):
    """A tenant network with a VXLAN segment, a router on it (interface and gateway), a guest port
    bound to the compute host; both hosts' L2 agents reported their VTEPs."""
    states = AgentStateCallbacks(manager.store.db)
    for host, ip in VTEPS.items():
        await states.report_state(admin_context(), L2_AGENT, host, started=True, tunneling_ip=ip)
    public, _ = await external_network(h)
    net, sub = await tenant_network(h, "10.9.0.0/24")
    shown = (await h.client.get(f"/v2.0/networks/{net['id']}")).json()["network"]
    assert shown["provider:network_type"] == "vxlan", shown
    r = await router(h)
    await put(h, f"/v2.0/routers/{r['id']}/add_router_interface", {"subnet_id": sub["id"]}, member())
    await put(h, f"/v2.0/routers/{r['id']}", {"router": {"external_gateway_info": {"network_id": public["id"]}}})
    guest = await h.port(net["id"], device_owner="compute:nova", device_id="vm-1", **{"binding:host_id": COMPUTE})
    # A port that only says it is a router's (no router has it) is no L3 agent's to bind.
    await h.port(net["id"], device_owner="network:router_interface", device_id="no-such-router")
    return net, r, guest


async def _router_ports(h, router_id: str) -> list[dict]:
    r = await h.client.get("/v2.0/ports", params={"device_id": router_id})
    assert r.status_code == 200, r.text
    return r.json()["ports"]


async def test_the_l3_agents_sync_binds_the_router_ports_to_its_host_and_l2pop_carries_them(h, network, manager, rt):
    net, r, guest = await _topology(h, manager)
    ports = await _router_ports(h, r["id"])
    assert {p["device_owner"] for p in ports} == {"network:router_interface", "network:router_gateway"}
    assert all(p["binding:host_id"] == "" for p in ports)
    interface = next(p for p in ports if p["device_owner"] == "network:router_interface")
    router_entry = [interface["mac_address"].lower(), interface["fixed_ips"][0]["ip_address"]]
    # Before the L3 agent took the router, the compute host learns nothing of it.
    before = await l2pop.fdb_entries(rt, COMPUTE, [net["id"]])
    assert router_entry not in before.get(net["id"], {}).get("vteps", {}).get(VTEPS[NETWORK_NODE], [])

    # The fanouts of the changes so far are delivered: what the recorder gets comes from the sync.
    await asyncio.gather(*network.l2pop_notifier._tasks)
    # A port not bound to the agent's host yet (added after the sync bound the others) is not in
    # its configuration: its device would appear to an L2 agent it is no port of.
    unbound = (await manager.routers.routers_for_agent([r["id"]], NETWORK_NODE))[0]
    assert unbound["interfaces"] == [] and unbound["gateway"] is None
    recorder = FdbRecorder()
    await rt.bus.serve(L2_AGENT_TOPIC, recorder, host=COMPUTE)
    try:
        config = await L3PluginEndpoint(manager.routers).sync_routers(admin_context(), NETWORK_NODE, [r["id"]])
        assert [c["id"] for c in config] == [r["id"]]
        assert [i["port_id"] for i in config[0]["interfaces"]] == [interface["id"]]
        assert config[0]["gateway"] is not None
        await asyncio.wait_for(_until(recorder, lambda: [net["id"]] in recorder.changed), 5)
    finally:
        await rt.bus.unserve(recorder)

    ports = await _router_ports(h, r["id"])
    assert {p["binding:host_id"] for p in ports} == {NETWORK_NODE}
    # The compute host floods to the network node and knows the router's MAC and address there ...
    compute = (await l2pop.fdb_entries(rt, COMPUTE, [net["id"]]))[net["id"]]
    assert router_entry in compute["vteps"][VTEPS[NETWORK_NODE]]
    # ... and the network node (the router's host) knows the guest's at the compute host.
    node = (await l2pop.fdb_entries(rt, NETWORK_NODE, [net["id"]]))[net["id"]]
    assert [guest["mac_address"].lower(), guest["fixed_ips"][0]["ip_address"]] in node["vteps"][VTEPS[COMPUTE]]

    # A sync that finds them bound changes nothing (no fanout, no new revision).
    revisions = {p["id"]: p["revision_number"] for p in ports}
    assert await manager.routers.bind_router_ports(NETWORK_NODE, None) == []
    assert {p["id"]: p["revision_number"] for p in await _router_ports(h, r["id"])} == revisions


async def test_the_router_ports_follow_the_l3_agent_to_another_host(h, manager, rt):
    net, r, _guest = await _topology(h, manager)
    endpoint = L3PluginEndpoint(manager.routers)
    await endpoint.sync_routers(admin_context(), NETWORK_NODE, None)
    await endpoint.sync_routers(admin_context(), "netnode2", None)
    assert {p["binding:host_id"] for p in await _router_ports(h, r["id"])} == {"netnode2"}
    assert {p["binding:host_id"] for p in await _router_ports(h, "no-such-router")} == {""}


async def _until(recorder: FdbRecorder, predicate) -> None:
    while not predicate():
        recorder.event.clear()
        await recorder.event.wait()
