"""The network service tells the DHCP agents what changed (topic ``dhcp_agent``, fanout, after
the commit), and the DHCP agent's loop coalesces the notifications (no dnsmasq here: the agent's
sync is replaced by a recorder)."""

from __future__ import annotations

import asyncio

import pytest

from nefos import exceptions
from nefos.bus import Endpoint, interfaces
from nefos.context import admin_context
from nefos.control.network.agent_rpc import DHCP_TOPIC
from nefos.agents.dhcp_agent import DhcpAgent
from tests.eventually import eventually


class Recorder(Endpoint):
    rpc_interface = interfaces.DHCP_AGENT

    def __init__(self):
        self.seen: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()

    async def network_changed(self, ctx, network_id: str, event: str | None = None) -> None:
        self.seen.append((event, network_id))
        self.arrived.set()


async def _drain(rec: Recorder, n: int) -> list[tuple[str, str]]:
    for _ in range(200):
        if len(rec.seen) >= n:
            break
        await asyncio.sleep(0.01)
    out, rec.seen = rec.seen, []
    return out


async def test_changes_are_fanned_out_to_the_dhcp_agents_after_commit(rt, manager):
    agents = [Recorder(), Recorder()]
    for i, rec in enumerate(agents):
        await rt.bus.serve(DHCP_TOPIC, rec, host=f"net-{i}")
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "n"})
    sub = await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.9.0.0/24", "ip_version": 4})
    port = await manager.create_port(ctx, {"network_id": net["id"]})
    await manager.update_port(ctx, port["id"], {"name": "renamed"})
    await manager.ports.update_port_status(ctx, port["id"], "ACTIVE")  # status only: nothing for DHCP
    await manager.delete_port(ctx, port["id"])
    await manager.update_subnet(ctx, sub["id"], {"name": "s"})
    await manager.update_network(ctx, net["id"], {"admin_state_up": False})
    await manager.delete_subnet(ctx, sub["id"])
    await manager.delete_network(ctx, net["id"])
    want = [(e, net["id"]) for e in ("subnet_create_end", "port_create_end", "port_update_end", "port_delete_end",
                                     "subnet_update_end", "network_update_end", "subnet_delete_end",
                                     "network_delete_end")]
    for rec in agents:  # every agent (fanout), each change once
        assert await _drain(rec, len(want)) == want


async def test_nothing_is_sent_for_a_change_that_did_not_commit(rt, manager):
    rec = Recorder()
    await rt.bus.serve(DHCP_TOPIC, rec)
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "n"})
    await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.9.1.0/30", "ip_version": 4})
    await _drain(rec, 1)
    with pytest.raises(exceptions.Error):  # the first takes the one free address, the second fails:
        await manager.ports.create_ports(ctx, [{"network_id": net["id"]}, {"network_id": net["id"]}])
    # All rolled back, the first port's change too: the next message is a later change's.
    await manager.update_network(ctx, net["id"], {"name": "later"})
    assert await _drain(rec, 1) == [("network_update_end", net["id"])]
    await manager.create_port(ctx, {"network_id": net["id"]})
    assert await _drain(rec, 1) == [("port_create_end", net["id"])]


async def test_a_failing_bus_never_fails_the_change(rt, manager, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("bus down")
    monkeypatch.setattr(rt.bus, "fanout", broken)
    ctx = admin_context()
    net = await manager.create_network(ctx, {"name": "n"})
    await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.9.2.0/24", "ip_version": 4})
    port = await manager.create_port(ctx, {"network_id": net["id"]})
    assert port["network_id"] == net["id"]
    await asyncio.sleep(0.05)


async def test_notifications_during_a_sync_coalesce_into_one_more(rt, monkeypatch):
    """Notified: that network synced at once; notifications arriving while it runs: one more
    sync of those networks together; the periodic (all networks) sync only at its interval."""
    agent = DhcpAgent(rt, "net-1", interval=3600)
    calls: list = []
    running, release = asyncio.Event(), asyncio.Event()

    async def sync(network_ids=None):
        calls.append(None if network_ids is None else set(network_ids))
        if network_ids is not None and not calls[1:-1]:  # the first notified sync waits
            running.set()
            await release.wait()
        agent.synced.set()

    async def heartbeat(started=False):
        pass

    monkeypatch.setattr(agent, "sync", sync)
    monkeypatch.setattr(agent, "_heartbeat", heartbeat)
    task = asyncio.create_task(agent._loop())
    try:
        await asyncio.wait_for(agent.synced.wait(), 5)
        assert calls == [None]  # the start's full sync
        agent.network_changed("A")
        await asyncio.wait_for(running.wait(), 5)
        for _ in range(5):
            agent.network_changed("A")
        agent.network_changed("B")
        release.set()
        await eventually(lambda: len(calls) >= 3)
        # A later notification, once that one more sync ran: its own sync follows, nothing between.
        agent.network_changed("C")
        await eventually(lambda: len(calls) >= 4)
        assert calls == [None, {"A"}, {"A", "B"}, {"C"}]
        assert (agent.full_syncs, agent.network_syncs) == (1, 3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
