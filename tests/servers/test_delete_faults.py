"""A delete the API does itself (the server's host is down) when the network service cannot be
reached: the server is deleted all the same (204), and its ports, which would keep their addresses
taken for good, are released by a conductor once the network service answers again."""

from __future__ import annotations

import asyncio
import time

from nefos import exceptions
from tests.clouds import ADMIN, start_cloud, stop_cloud
from tests.deployment.test_heartbeats import DOWN_TIME, REPORT_INTERVAL, _wait_states, stop_heartbeat


def _conductor(cloud):
    return next(c.service for c in cloud.cloud.components if c.name == "conductor")


def _cut_network(bus) -> dict:
    state = {"down": True}
    original = bus.call

    async def call(ctx, topic, method, *args, **kwargs):
        if topic == "network" and state["down"]:
            raise exceptions.ServiceUnavailable(f"timed out sending to {topic}.{method}")
        return await original(ctx, topic, method, *args, **kwargs)

    bus.call = call
    return state


async def test_a_local_delete_without_the_network_service_leaks_no_port(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME)
    try:
        net = await cloud.make_network()
        await _wait_states(cloud, {"host-1": "up"})
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(server_id, "ACTIVE")
        assert len(await cloud.ports(device_id=server_id)) == 1
        stop_heartbeat(cloud, "host-1")
        await _wait_states(cloud, {"host-1": "down"})
        network = _cut_network(cloud.rt.bus)
        r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
        assert r.status_code == 204, r.text
        await cloud.wait_gone(server_id)
        network["down"] = False
        assert len(await cloud.ports(device_id=server_id)) == 1  # not released yet
        conductor = _conductor(cloud)
        # The shipped schedule: a conductor looks every minute.
        assert [t.interval for t in conductor.periodic if t.name == "release_ports_of_deleted_servers"] == [60]
        await conductor.endpoint.release_ports_of_deleted_servers()
        deadline = time.monotonic() + 10
        while await cloud.ports(device_id=server_id):
            assert time.monotonic() < deadline, "the deleted server's port was never released"
            await asyncio.sleep(0.05)
    finally:
        await stop_cloud(cloud)
