"""Heartbeats: a compute service silent longer than ``service_down_time`` is down.

os-services shows it ``state: down`` (os-hypervisors too, and servers on it
report host_status DOWN at 2.16), the scheduler skips it, and it is back up
as soon as it reports again.
"""

from __future__ import annotations

import asyncio
import time

from nefos.service import PeriodicTask
from tests.clouds import start_cloud, stop_cloud

REPORT_INTERVAL = 0.2
# Fifteen report intervals: a loaded machine running the whole suite stalled a reporting host's beats
# for over 1.5 s (every service of the cloud shares the test's one event loop), so it read down too.
DOWN_TIME = 3.0


def _service(cloud, host: str):
    return next(c.service for c in cloud.cloud.components
                if getattr(c, "host", None) == host and hasattr(c, "service"))


def stop_heartbeat(cloud, host: str) -> None:
    """Silence the host's compute service (its process hangs, say): only the heartbeat stops."""
    service = _service(cloud, host)
    beats = [t for t in service._tasks if t.get_name().endswith(":heartbeat")]
    assert len(beats) == 1
    beats[0].cancel()
    service._tasks.remove(beats[0])


def restart_heartbeat(cloud, host: str) -> None:
    service = _service(cloud, host)
    task = PeriodicTask("heartbeat", REPORT_INTERVAL, service.heartbeat, initial_delay=0)
    service._tasks.append(asyncio.create_task(task.run_forever(), name=f"{service.binary}:heartbeat"))


async def _compute_states(cloud) -> dict[str, str]:
    r = await cloud.compute.get("/v2.1/os-services", params={"binary": "nova-compute"})
    assert r.status_code == 200, r.text
    return {s["host"]: s["state"] for s in r.json()["services"] if s["binary"] == "nova-compute"}


async def _wait_states(cloud, wanted: dict[str, str], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (states := await _compute_states(cloud)) != wanted:
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.1)


async def test_silent_compute_is_down_and_skipped(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=2, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME)
    try:
        net = await cloud.make_network()
        # Both report (a loaded CI machine can delay the first beats past the short down time).
        await _wait_states(cloud, {"host-1": "up", "host-2": "up"})
        # A server on host-2 before it goes quiet.
        first = (await cloud.boot(name="before", networks=[{"uuid": net["id"]}],
                                  availability_zone="nova:host-2"))["server"]["id"]
        await cloud.wait_status(first, "ACTIVE")

        silenced_at = time.monotonic()
        stop_heartbeat(cloud, "host-2")
        await _wait_states(cloud, {"host-1": "up", "host-2": "down"})
        assert time.monotonic() - silenced_at >= DOWN_TIME - REPORT_INTERVAL  # not before it is due
        # Every other service still reports: only the silent one is down.
        r = await cloud.compute.get("/v2.1/os-services")
        down = [(s["binary"], s["host"]) for s in r.json()["services"] if s["state"] == "down"]
        assert down == [("nova-compute", "host-2")]
        r = await cloud.compute.get("/v2.1/os-hypervisors/detail")
        assert {h["hypervisor_hostname"]: h["state"] for h in r.json()["hypervisors"]} == {
            "host-1": "up", "host-2": "down"}
        r = await cloud.compute.get(f"/v2.1/servers/{first}", headers={"OpenStack-API-Version": "compute 2.16"})
        assert r.json()["server"]["host_status"] == "DOWN"

        # The scheduler skips it, even though host-2 has the most free RAM now.
        ids = [(await cloud.boot(name=f"after-{i}", networks=[{"uuid": net["id"]}]))["server"]["id"]
               for i in range(4)]
        for server_id in ids:
            server = await cloud.wait_status(server_id, "ACTIVE")
            assert server["OS-EXT-SRV-ATTR:host"] == "host-1"
        assert set(cloud.driver("host-2").guests) == {first}

        # It reports again: up, and chosen again.
        restart_heartbeat(cloud, "host-2")
        await _wait_states(cloud, {"host-1": "up", "host-2": "up"})
        server_id = (await cloud.boot(name="back", networks=[{"uuid": net["id"]}]))["server"]["id"]
        server = await cloud.wait_status(server_id, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == "host-2"  # the spread weigher prefers the emptier host
    finally:
        await stop_cloud(cloud)


async def test_all_computes_down_is_no_valid_host(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME)
    try:
        net = await cloud.make_network()
        stop_heartbeat(cloud, "host-1")
        await _wait_states(cloud, {"host-1": "down"})
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        server = await cloud.wait_status(server_id, "ERROR")
        assert "No valid host" in server["fault"]["message"]
        assert cloud.driver("host-1").guests == {}
        assert (await cloud.hypervisor_usage())["allocations"] == 0
    finally:
        await stop_cloud(cloud)
