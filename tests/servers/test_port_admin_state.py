"""A port taken down carries nothing, and its status says so: setting a server's port
``admin_state_up`` to false makes the host's L2 agent take the device down and the port DOWN;
setting it true again brings the device back and the port ACTIVE (Neutron's agents). Here through
the whole cloud with the fake driver and its fake L2 agent, at the shipped defaults; the real
guest's side (frames stop) is ``tests/libvirt/test_port_admin_state_guest.py``."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.clouds import member, start_cloud, stop_cloud

OTHER = member(project="b" * 32, user="v" * 32)


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1)
    yield harness
    await stop_cloud(harness)


async def _port_status(cloud, port_id: str, wanted: str, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = await cloud.network.get(f"/v2.0/ports/{port_id}", headers=member())
        assert r.status_code == 200, r.text
        port = r.json()["port"]
        if port["status"] == wanted:
            return port
        assert time.monotonic() < deadline, f"port {port_id} is {port['status']}, not {wanted}"
        await asyncio.sleep(0.05)


async def _set_admin_state(cloud, port_id: str, up: bool, headers=None, expect: int = 200) -> dict:
    r = await cloud.network.put(f"/v2.0/ports/{port_id}", json={"port": {"admin_state_up": up}},
                                headers=headers or member())
    assert r.status_code == expect, r.text
    return r.json()


async def _server_port(cloud) -> tuple[str, dict]:
    net = await cloud.make_network("private", "10.0.0.0/24", headers=member())
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE", headers=member())
    [port] = await cloud.ports(device_id=server_id)
    return server_id, await _port_status(cloud, port["id"], "ACTIVE")


async def test_a_server_port_set_administratively_down_goes_down_and_comes_back_active(cloud):
    server_id, port = await _server_port(cloud)
    answer = await _set_admin_state(cloud, port["id"], False)
    assert answer["port"]["admin_state_up"] is False
    down = await _port_status(cloud, port["id"], "DOWN")
    assert down["admin_state_up"] is False
    assert (await cloud.server(server_id))["status"] == "ACTIVE"  # the server runs on, cut off
    # The agent resynchronising (a restart) keeps it down.
    from tests.events.conftest import agent
    l2 = agent(cloud, "host-1")
    await l2.stop()
    await l2.start()
    await l2.idle()
    assert (await _port_status(cloud, port["id"], "DOWN"))["admin_state_up"] is False

    await _set_admin_state(cloud, port["id"], True)
    up = await _port_status(cloud, port["id"], "ACTIVE")
    assert up["admin_state_up"] is True


async def test_another_project_cannot_take_a_server_port_down(cloud):
    _, port = await _server_port(cloud)
    await _set_admin_state(cloud, port["id"], False, headers=OTHER, expect=404)
    r = await cloud.network.get(f"/v2.0/ports/{port['id']}", headers=member())
    assert r.json()["port"]["admin_state_up"] is True and r.json()["port"]["status"] == "ACTIVE"
