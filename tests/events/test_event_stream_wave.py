"""A stream client connected before a wave of 200 boots, every service in its own process over
RabbitMQ, on PostgreSQL and on MariaDB (where transactions commit out of id order), its API process
killed and started again in the middle: it receives every state change of every server, in order,
none missing, and a client resuming from the start reads back exactly what the live one got."""

from __future__ import annotations

import asyncio
import time

import httpx

from nefos.cmd.event_tail import read_stream
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.noauth import ADMIN
from tests.deployment.test_multiprocess import SERVER_BACKENDS, running_cloud

import pytest

SERVERS = 200
PIPELINE = ["scheduling", "networking", "block_device_mapping", "spawning"]


def _restart_api(procs) -> None:
    """Kill the API process (SIGKILL: no goodbye to its clients) and start a new one on its port."""
    [(name, proc, log)] = [entry for entry in procs.procs if entry[0] == "api"]
    proc.kill()
    proc.wait(timeout=30)
    log.close()
    procs.procs.remove((name, proc, log))
    procs.start(["api"])


async def _collect(base_url: str, into: list[dict], connected: asyncio.Event | None = None, **kwargs) -> None:
    """Every event of the stream into ``into``; ``connected`` set at each (re)connection."""
    async with httpx.AsyncClient(verify=verified_tls(), base_url=base_url) as client:
        async for message in read_stream(client, "/v2.1/nefos-events", headers=ADMIN, reconnect_delay=0.2,
                                         **kwargs):
            if message["event"] == "stream.connected":
                if connected is not None:
                    connected.set()
            else:
                into.append(message)


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
def test_a_client_gets_every_state_change_of_a_200_server_wave(backend, tmp_path):
    with running_cloud(backend, tmp_path, fake_vcpus="128", quota_instances="-1", quota_cores="-1",
                       quota_ram="-1", quota_ports="-1") as (compute, network, procs):
        asyncio.run(_wave(compute, network, procs))


async def _wave(compute, network, procs) -> None:
    base = str(compute.base_url)
    r = network.post("/v2.0/networks", json={"network": {"name": "wave"}})
    net_id = r.json()["network"]["id"]
    r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.30.0.0/22",
                                                       "ip_version": 4}})
    assert r.status_code == 201, r.text
    live: list[dict] = []
    connected = asyncio.Event()
    reader = asyncio.create_task(_collect(base, live, connected, params={"type": "server"}))
    await asyncio.wait_for(connected.wait(), 30)  # the live client is in before the first create
    async with httpx.AsyncClient(verify=verified_tls(), base_url=base, headers=ADMIN, timeout=120) as client:
        body = {"imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}]}
        limit = asyncio.Semaphore(40)

        async def create(i: int) -> str:
            async with limit:
                r = await client.post("/v2.1/servers", json={"server": {"name": f"w{i}", **body}})
            assert r.status_code == 202, r.text
            return r.json()["server"]["id"]
        ids = await asyncio.gather(*[create(i) for i in range(SERVERS)])
        # The cut: the API process the client streams from is killed while the wave builds, and a new
        # one started; the client reconnects with the last id it saw.
        def active(server_id: str) -> bool:
            return any(m["data"]["server_id"] == server_id and m["data"].get("status") == "ACTIVE"
                       and m["data"].get("task_state") is None for m in live)
        await asyncio.sleep(0.5)
        active_before_cut = sum(active(i) for i in ids)
        await asyncio.to_thread(_restart_api, procs)
        deadline = time.monotonic() + 240
        while not all(active(i) for i in ids):
            procs.check_alive()
            assert time.monotonic() < deadline, (
                f"{sum(active(i) for i in ids)} of {SERVERS} ACTIVE in the stream\n{procs.logs()}")
            await asyncio.sleep(0.2)

        # What the log holds from the first server's creation on, read by a resuming client.
        first = min(int(m["id"]) for m in live)
        replay: list[dict] = []
        await _collect(base, replay, params={"type": "server", "timeout": "2"},
                       last_event_id=str(first - 1))
    reader.cancel()

    replay = [m for m in replay if m["id"] is not None]
    assert active_before_cut < SERVERS, "the cut came after the wave"
    live_ids = [int(m["id"]) for m in live]
    assert live_ids == sorted(live_ids) and len(set(live_ids)) == len(live_ids)
    replay_ids = [int(m["id"]) for m in replay]
    assert replay_ids[:len(live_ids)] == live_ids, "the live client missed or reordered events"
    for server_id in ids:
        states = [m["data"] for m in live if m["data"]["server_id"] == server_id
                  and m["event"] in ("server.created", "server.updated")]
        assert states[0]["task_state"] == "scheduling" and states[0]["status"] == "BUILD"
        tasks = [s["task_state"] for s in states if s["task_state"] in PIPELINE]
        assert tasks == sorted(tasks, key=PIPELINE.index) and set(tasks) == set(PIPELINE), tasks
        assert states[-1]["status"] == "ACTIVE"
        assert [s["status"] for s in states].index("ACTIVE") == len(states) - 1
