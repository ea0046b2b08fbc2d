"""Evacuations racing, with every service in its own process on PostgreSQL or MariaDB (on SQLite one
process serialises every write, so these races cannot occur there): the evacuations of a lost host's
servers reach two schedulers together and never overcommit the one host left, and of many evacuate
requests for one server exactly one is accepted."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from nefos.cmd.allinone import free_port
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.noauth import ADMIN
from tests.deployment.test_multiprocess import SERVER_BACKENDS, running_cloud
from tests.deployment.test_multiprocess_races import (_FIVE_TINY_SERVERS, _TWO_SCHEDULERS_TWO_CONDUCTORS, _query,
                                                     _steady_servers, _wait_answering)


@pytest.fixture(params=SERVER_BACKENDS)
def cloud_with_room_for_10(request, tmp_path):
    with running_cloud(request.param, tmp_path, _TWO_SCHEDULERS_TWO_CONDUCTORS, **_FIVE_TINY_SERVERS) as cloud:
        yield cloud


def _boot_on(compute: httpx.Client, host: str, count: int) -> list[str]:
    ids = []
    for i in range(count):
        r = compute.post("/v2.1/servers", headers={"OpenStack-API-Version": "compute 2.37"}, json={"server": {
            "name": f"{host}-{i}", "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": "none",
            "availability_zone": f"nova:{host}"}})
        assert r.status_code == 202, r.text
        ids.append(r.json()["server"]["id"])
    return ids


async def _evacuate(urls: list[str], server_ids: list[str]) -> list[httpx.Response]:
    headers = {**ADMIN, "OpenStack-API-Version": "compute 2.14"}
    clients = [httpx.AsyncClient(verify=verified_tls(), base_url=url, headers=headers, timeout=120) for url in urls]
    try:
        return await asyncio.gather(*[
            clients[i % len(clients)].post(f"/v2.1/servers/{server_id}/action", json={"evacuate": {}})
            for i, server_id in enumerate(server_ids)])
    finally:
        for c in clients:
            await c.aclose()


def test_evacuations_at_once_fill_the_room_left_exactly(cloud_with_room_for_10):
    """mp-compute-1 (5 servers) is lost; mp-compute-2 has room for 3 more: 3 evacuations succeed, 2
    end in ERROR on their source with "No valid host", no node over its capacity; of 10 evacuate
    requests for one server at once through two API processes one is accepted, 9 answer 409."""
    compute, _network, procs = cloud_with_room_for_10
    lost = _boot_on(compute, "mp-compute-1", 5)
    staying = _boot_on(compute, "mp-compute-2", 2)
    servers = _steady_servers(compute, 7, procs)
    assert {s["status"] for s in servers} == {"ACTIVE"}, [s.get("fault") for s in servers]
    port = free_port()
    procs.env = dict(procs.env, NEFOS_COMPUTE_API_PORT=str(port))
    procs.start(["api", "--host", "api-2"])
    second = f"http://127.0.0.1:{port}"
    _wait_answering(procs, f"{second}/v2.1/flavors")

    (lost_host,) = [p for name, p, _log in procs.procs if name.endswith("mp-compute-1")]
    lost_host.send_signal(signal.SIGSTOP)  # hung: its heartbeats stop; the operator forces it down
    try:
        r = compute.put("/v2.1/os-services/force-down", headers={"OpenStack-API-Version": "compute 2.11"},
                        json={"host": "mp-compute-1", "binary": "nova-compute", "forced_down": True})
        assert r.status_code == 200, r.text
        with procs.held("conductor"):  # the evacuations reach the schedulers together
            answers = asyncio.run(_evacuate([str(compute.base_url).rstrip("/"), second],
                                            [lost[0]] * 10 + lost[1:]))
        codes = [a.status_code for a in answers]
        assert sorted(codes[:10]) == [200] + [409] * 9, [a.text[:200] for a in answers[:10]]
        assert codes[10:] == [200] * 4, [a.text[:200] for a in answers[10:]]

        deadline = time.monotonic() + 120
        while True:
            servers = {s["id"]: s for s in _steady_servers(compute, 7, procs)}
            if all(servers[i]["status"] == "ERROR" or servers[i]["OS-EXT-SRV-ATTR:host"] == "mp-compute-2"
                   for i in lost):
                break
            assert time.monotonic() < deadline, [servers[i]["status"] for i in lost]
            time.sleep(0.5)
        moved = [i for i in lost if servers[i]["status"] == "ACTIVE"]
        failed = [i for i in lost if servers[i]["status"] == "ERROR"]
        assert (len(moved), len(failed)) == (3, 2), (len(moved), len(failed))
        assert all("No valid host" in servers[i]["fault"]["message"] for i in failed), \
            [servers[i]["fault"] for i in failed]
        assert all(servers[i]["OS-EXT-SRV-ATTR:host"] == "mp-compute-1" for i in failed)
        assert all(servers[i]["status"] == "ACTIVE" for i in staying)
        claimed = _query(procs.env["NEFOS_DATABASE_URL"],
                         "SELECT n.host, n.local_gb * n.disk_allocation_ratio, sum(a.disk_gb), count(*) "
                         "FROM allocations a JOIN compute_nodes n ON n.id = a.compute_node_id GROUP BY n.id, n.host, "
                         "n.local_gb, n.disk_allocation_ratio")
        # mp-compute-2 full (its 2 and the 3 evacuated); the 2 that found no room keep their source claims.
        assert sorted((host, float(room), int(used), n) for host, room, used, n in claimed) == [
            ("mp-compute-1", 5.0, 2, 2), ("mp-compute-2", 5.0, 5, 5)], claimed
        statuses = sorted(status for (status,) in _query(
            procs.env["NEFOS_DATABASE_URL"], "SELECT status FROM migrations WHERE migration_type = 'evacuation'"))
        assert statuses == ["done"] * 3 + ["error"] * 2, statuses
    finally:
        lost_host.send_signal(signal.SIGCONT)
