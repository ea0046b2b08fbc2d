"""The L2 agent protocol over the bus (``q-plugin``) and the fake agent bound to the fake driver."""

from __future__ import annotations

import uuid

from nefos.context import admin_context
from nefos.bus import interfaces
from nefos.bus.versioning import RPCClient
from tests.events.conftest import agent, boot, eventually, port_of


async def _call(cloud, method: str, device: str, host: str) -> dict:
    return await RPCClient(cloud.rt.bus, interfaces.PLUGIN).call(
        admin_context(), method, device=device, agent_host=host, agent_id="test-agent")


async def _port(cloud, host: str) -> dict:
    net = await cloud.make_network(name=f"n-{uuid.uuid4().hex[:6]}", cidr="10.7.0.0/24")
    r = await cloud.network.post("/v2.0/ports", json={"port": {
        "network_id": net["id"], "device_id": str(uuid.uuid4()), "device_owner": "compute:nova",
        "binding:host_id": host}})
    assert r.status_code == 201, r.text
    return r.json()["port"]


async def _status(cloud, port_id: str) -> str:
    r = await cloud.network.get(f"/v2.0/ports/{port_id}")
    return r.json()["port"]["status"]


async def test_device_details_up_and_down(cloud):
    host = cloud.hosts[0]
    port = await _port(cloud, host)
    assert port["status"] == "DOWN"  # bound, but no agent reported anything yet
    details = await _call(cloud, "get_device_details", port["id"], host)
    assert details["port_id"] == port["id"] and details["mac_address"] == port["mac_address"]
    assert details["vif_details"]["vif_plugged_event"] == "plug" and details["status"] == "BUILD"
    assert await _status(cloud, port["id"]) == "BUILD"  # the agent is wiring it
    assert await _call(cloud, "update_device_up", port["id"], host) == {"device": port["id"], "exists": True}
    assert await _status(cloud, port["id"]) == "ACTIVE"
    assert await _call(cloud, "update_device_down", port["id"], host) == {"device": port["id"], "exists": True}
    assert await _status(cloud, port["id"]) == "DOWN"


async def test_reports_from_another_host_are_ignored(cloud):
    host = cloud.hosts[0]
    port = await _port(cloud, host)
    assert await _call(cloud, "get_device_details", port["id"], "elsewhere") == {"device": port["id"]}
    reply = await _call(cloud, "update_device_up", port["id"], "elsewhere")
    assert reply["bound_elsewhere"] and await _status(cloud, port["id"]) == "DOWN"
    await _call(cloud, "update_device_up", port["id"], host)
    reply = await _call(cloud, "update_device_down", port["id"], "elsewhere")  # a port that moved on
    assert reply["bound_elsewhere"] and await _status(cloud, port["id"]) == "ACTIVE"


async def test_unknown_devices(cloud):
    host = cloud.hosts[0]
    missing = str(uuid.uuid4())
    assert await _call(cloud, "get_device_details", missing, host) == {"device": missing}
    assert await _call(cloud, "update_device_up", missing, host) == {"device": missing, "exists": False}
    assert await _call(cloud, "update_device_down", missing, host) == {"device": missing, "exists": False}


async def test_fake_agent_stopped_then_started_resynchronises(cloud):
    host = cloud.hosts[0]
    l2 = agent(cloud, host)
    server_id = await boot(cloud)
    await cloud.wait_status(server_id, "ACTIVE")
    port = await port_of(cloud, server_id)
    assert port["status"] == "ACTIVE"
    await l2.stop()
    # While the agent is stopped the switch changes: the guest's VIF goes away (an operator unplugs it).
    driver = cloud.driver(host)
    driver.unplug_vifs({"uuid": server_id})
    assert (await port_of(cloud, server_id))["status"] == "ACTIVE"  # nobody reported it
    await l2.start()  # resync: the device is gone -> DOWN
    await eventually(lambda: _is(cloud, server_id, "DOWN"))
    driver.plug_vifs({"uuid": server_id}, [{"id": port["id"]}])
    await eventually(lambda: _is(cloud, server_id, "ACTIVE"))


async def _is(cloud, server_id, status):
    return (await port_of(cloud, server_id))["status"] == status


async def test_a_hard_reboot_reports_only_the_new_plug(cloud):
    host = cloud.hosts[0]
    server_id = await boot(cloud)
    await cloud.wait_status(server_id, "ACTIVE")
    statuses = []
    manager = next(c.manager for c in cloud.cloud.components if getattr(c, "notifier", None) is not None)

    async def watch(s, ctx, before, after):
        if after is not None and after["device_id"] == server_id and before["status"] != after["status"]:
            statuses.append((before["status"], after["status"]))
    manager.store.add_port_change_hook(watch)
    await cloud.action(server_id, {"reboot": {"type": "HARD"}})
    await cloud.wait_status(server_id, "ACTIVE")
    # Unplugged and plugged again before the agent looked: re-wired (BUILD), then ACTIVE -> one plugged event.
    assert statuses == [("ACTIVE", "BUILD"), ("BUILD", "ACTIVE")]
    assert agent(cloud, host).reported[(await port_of(cloud, server_id))["id"]] == "up"
