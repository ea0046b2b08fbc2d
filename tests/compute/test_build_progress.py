"""A server's ``progress`` moves during its build as its steps begin (10, 25, 50, 75), and is 100
once ACTIVE; a rescheduled build starts again from 0."""

from __future__ import annotations

import asyncio

from nefos.objects import instance as instance_obj
from tests.compute.conftest import boot_active
from tests.clouds import start_cloud, stop_cloud


def record_progress(monkeypatch) -> dict[str, list[int]]:
    """Every ``progress`` an instance save writes, by instance."""
    written: dict[str, list[int]] = {}
    save = instance_obj.save

    async def recording(db, uuid, updates, *args, **kwargs):
        row = await save(db, uuid, updates, *args, **kwargs)
        if "progress" in updates:
            written.setdefault(uuid, []).append(updates["progress"])
        return row
    monkeypatch.setattr(instance_obj, "save", recording)
    return written


async def test_progress_moves_with_the_build_steps(tmp_path, monkeypatch):
    written = record_progress(monkeypatch)
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        [server_id] = await boot_active(cloud)
        assert written[server_id] == [10, 25, 50, 75, 100]
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}")
        assert r.json()["server"]["progress"] == 100
    finally:
        await stop_cloud(cloud)


async def test_a_slow_spawn_shows_its_progress_to_the_user(tmp_path):
    """With a spawn that takes a while (2 s), a user polling the server sees BUILD at 75 % while it
    spawns, then ACTIVE at 100 %."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_spawn_delay=2.0)
    try:
        net = await cloud.make_network()
        server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        seen = []
        for _ in range(600):
            server = (await cloud.compute.get(f"/v2.1/servers/{server_id}")).json()["server"]
            seen.append((server["status"], server.get("progress")))
            if server["status"] != "BUILD":
                break
            await asyncio.sleep(0.02)
        assert seen[-1] == ("ACTIVE", 100), seen
        assert ("BUILD", 75) in seen, seen
        progress = [p for status, p in seen if status == "BUILD"]
        assert progress == sorted(progress), seen  # never backwards
    finally:
        await stop_cloud(cloud)


async def test_a_rescheduled_build_starts_again_from_zero(tmp_path, monkeypatch):
    from tests.servers.test_failures import _flavor_with_specs
    written = record_progress(monkeypatch)
    cloud = await start_cloud(tmp_path, fake_hosts=1, drivers={"host-2": "fake"})
    try:
        net = await cloud.make_network()
        flavor = await _flavor_with_specs(cloud, "fail-h1", {"nefos:fake_fail_spawn": "host-1"})
        server_id = (await cloud.boot(flavor=flavor, networks=[{"uuid": net["id"]}],
                                      availability_zone="nova:host-1"))["server"]["id"]
        await cloud.wait_status(server_id, "ERROR")  # a forced host: no other host to reschedule to
        assert written[server_id][:4] == [10, 25, 50, 75] and 0 in written[server_id][4:], written[server_id]
    finally:
        await stop_cloud(cloud)
