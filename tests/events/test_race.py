"""The race upstream is known for: an event that arrives before the compute host registered its waiter.

The event goes the real way — ``POST /v2.1/os-server-external-events`` over
HTTP, the durable inbox, a cast to the compute host — at every point between
the start of the operation and the registration of the waiter (before, at the
same time, after), 100 times, and every wait must be honoured without a
timeout. On the in-process bus, and on RabbitMQ.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid

import pytest

from nefos.objects import instance as instance_obj
from tests.events.conftest import QUICK, SERVICE, boot
from tests.clouds import start_cloud, stop_cloud

AMQP_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
REPETITIONS = 100


async def _race(cloud, repetitions: int = REPETITIONS) -> dict:
    server_id = await boot(cloud)
    await cloud.wait_status(server_id, "ACTIVE", timeout=30)
    host = cloud.hosts[0]
    events = cloud.compute_manager(host).instance_events
    instance = await instance_obj.get(cloud.rt.db, server_id)
    rng = random.Random(1234)
    timeouts, modes = 0, {"before": 0, "racing": 0, "after": 0}
    sources = {"inbox": 0, "bus": 0}  # how each wait was satisfied

    async def post(tag: str) -> None:
        r = await cloud.compute.post("/v2.1/os-server-external-events", headers=SERVICE, json={"events": [
            {"name": "network-vif-plugged", "server_uuid": server_id, "tag": tag, "status": "completed"}]})
        assert r.status_code == 200 and r.json()["events"][0]["code"] == 200, r.text

    for i in range(repetitions):
        await events.begin_operation(server_id)  # as a build / start / hard reboot does first
        tag = str(uuid.uuid4())
        mode = ("before", "racing", "after")[i % 3]
        modes[mode] += 1
        sender = None
        if mode == "before":
            await post(tag)  # accepted, stored and cast before anyone waits
            await asyncio.sleep(rng.choice([0, 0, 0.001, 0.005]))  # the cast may or may not be handled yet
        elif mode == "racing":
            sender = asyncio.create_task(post(tag))
            await asyncio.sleep(rng.choice([0, 0.0005, 0.002]))
        try:
            async with events.wait_for_instance_event(instance, [("network-vif-plugged", tag)],
                                                      deadline=5) as futures:
                if mode == "after":
                    await post(tag)  # the "triggering action"
            sources[next(iter(futures.values())).result()["source"]] += 1
        except asyncio.TimeoutError:
            timeouts += 1
        if sender is not None:
            await sender
    return {"timeouts": timeouts, "modes": modes, "sources": sources}


async def test_early_events_are_never_lost_local_bus(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, **QUICK)
    try:
        result = await _race(cloud)
    finally:
        await stop_cloud(cloud)
    assert result["timeouts"] == 0, result
    assert sum(result["modes"].values()) == REPETITIONS
    # Both paths were taken: events found in the inbox at registration, and events cast to a waiter.
    assert result["sources"]["inbox"] >= 20 and result["sources"]["bus"] >= 20, result


@pytest.mark.rabbit
async def test_early_events_are_never_lost_rabbitmq(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, bus_url=AMQP_URL, **QUICK)
    try:
        result = await _race(cloud)
    finally:
        await stop_cloud(cloud)
    assert result["timeouts"] == 0, result
    assert result["sources"]["inbox"] >= 20 and result["sources"]["bus"] >= 20, result
