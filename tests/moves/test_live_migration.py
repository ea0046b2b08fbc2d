"""Live migration through the real HTTP API on the in-process cloud (two fake hosts): the guest,
the server's host, its ports' binding, its claims and the migration record move as in Nova."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select, update as sa_update

from nefos.db.models import Allocation, Flavor, FlavorExtraSpec, Migration
from tests.clouds import ADMIN, member

MEMBER = member()


def _v(version: str) -> dict:
    return {**ADMIN, "OpenStack-API-Version": f"compute {version}"}


def _live(host, block_migration=False, **extra) -> dict:
    return {"os-migrateLive": {"host": host, "block_migration": block_migration, **extra}}


def _live_21(host) -> dict:
    return _live(host, disk_over_commit=False)


async def _boot_active(cloud) -> dict:
    if not getattr(cloud, "_live_net", None):
        cloud._live_net = await cloud.make_network(shared=True)
    server = (await cloud.boot(flavor="1", headers=MEMBER))["server"]
    return await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)


async def _host(cloud, server_id: str) -> str:
    return (await cloud.server(server_id, ADMIN))["OS-EXT-SRV-ATTR:host"]


async def _allocations(cloud) -> list[tuple[str, str]]:
    from nefos.db.models import ComputeNode
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(Allocation.consumer_uuid, ComputeNode.host)
                                .join(ComputeNode, ComputeNode.id == Allocation.compute_node_id))).all()
    return sorted((r[0], r[1]) for r in rows)


async def _records(cloud, server_id: str) -> list[dict]:
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(Migration).where(Migration.instance_uuid == server_id)
                                .order_by(Migration.id))).scalars().all()
    return [{"type": r.migration_type, "status": r.status, "source": r.source_compute, "dest": r.dest_compute}
            for r in rows]


async def _wait_idle(cloud, server_id: str, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        server = await cloud.server(server_id, ADMIN)
        if server["OS-EXT-STS:task_state"] is None:
            return server
        assert time.monotonic() < deadline, server
        await asyncio.sleep(0.02)


async def _check_moved(cloud, server_id: str, dest: str) -> None:
    assert await _host(cloud, server_id) == dest
    assert server_id in cloud.driver(dest).guests
    assert all(server_id not in cloud.driver(h).guests for h in cloud.hosts if h != dest)
    ports = await cloud.ports(device_id=server_id)
    assert ports and {p["binding:host_id"] for p in ports} == {dest}
    assert await _allocations(cloud) == [(server_id, dest)]


async def test_live_migrate_to_a_named_host_and_back(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    source = await _host(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    await cloud.action(sid, _live_21(dest))
    done = await _wait_idle(cloud, sid)
    assert done["status"] == "ACTIVE"
    await _check_moved(cloud, sid, dest)
    # and back (2.25: block_migration "auto")
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live(source, "auto"), headers=_v("2.25"))
    assert r.status_code == 202, r.text
    assert (await _wait_idle(cloud, sid))["status"] == "ACTIVE"
    await _check_moved(cloud, sid, source)
    assert await _records(cloud, sid) == [
        {"type": "live-migration", "status": "completed", "source": source, "dest": dest},
        {"type": "live-migration", "status": "completed", "source": dest, "dest": source}]
    listed = await cloud.compute.get("/v2.1/os-migrations", params={"migration_type": "live-migration"},
                                     headers=_v("2.23"))
    assert [m["status"] for m in listed.json()["migrations"] if m["instance_uuid"] == sid] == ["completed"] * 2
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-instance-actions", headers=ADMIN)
    assert [a["action"] for a in r.json()["instanceActions"]].count("live-migration") == 2


async def test_a_paused_server_stays_paused_and_the_scheduler_picks(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    source = await _host(cloud, sid)
    await cloud.action(sid, {"pause": None})
    await cloud.wait_status(sid, "PAUSED")
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live(None, "auto"), headers=_v("2.30"))
    assert r.status_code == 202, r.text
    done = await _wait_idle(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    assert done["status"] == "PAUSED"
    await _check_moved(cloud, sid, dest)
    assert cloud.driver(dest).guests[sid].power_state == 3  # paused


async def test_checks_answer_as_nova_and_leave_nothing_behind(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    source = await _host(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    # the source itself (forced before 2.30; through the scheduler from 2.30), an unknown host: 400
    for body, headers in ((_live_21(source), ADMIN), (_live(source), _v("2.30")), (_live_21("nowhere"), ADMIN)):
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=body, headers=headers)
        assert r.status_code == 400, r.text
    # the member may not; a bad body is a 400 before anything
    await cloud.action(sid, _live_21(dest), expect=403, headers=MEMBER)
    await cloud.action(sid, _live(dest), expect=400)  # 2.1 needs disk_over_commit
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live(None, force=True), headers=_v("2.30"))
    assert r.status_code == 400 and "non-provided destination" in r.text
    # a destination whose driver cannot live-migrate (the libvirt driver): 400, nothing moved
    cloud.driver(dest).supports_live_migration = False
    original = cloud.driver(dest).check_can_live_migrate_destination
    from nefos.host.virt.driver import ComputeDriver
    cloud.driver(dest).check_can_live_migrate_destination = \
        ComputeDriver.check_can_live_migrate_destination.__get__(cloud.driver(dest))
    try:
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live_21(dest), headers=ADMIN)
        assert r.status_code == 400 and "cannot live-migrate" in r.text, r.text
    finally:
        cloud.driver(dest).check_can_live_migrate_destination = original
        del cloud.driver(dest).supports_live_migration
    # a destination that is down: 400 (forced before 2.30: the conductor's check; 2.30: no valid host)
    from nefos.db.models import Service
    async with cloud.rt.db.transaction() as s:
        await s.execute(sa_update(Service).where(Service.host == dest).values(forced_down=True))
    try:
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live_21(dest), headers=ADMIN)
        assert r.status_code == 400, r.text
        assert r.json()["badRequest"]["message"] == f"Compute service of {dest} is unavailable at this time."
        r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live(dest), headers=_v("2.30"))
        assert r.status_code == 400 and "No valid host" in r.text, r.text
    finally:
        async with cloud.rt.db.transaction() as s:
            await s.execute(sa_update(Service).where(Service.host == dest).values(forced_down=False))
    after = await cloud.server(sid, ADMIN)
    assert (after["status"], after["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
    assert await _allocations(cloud) == [(sid, source)]
    assert sid in cloud.driver(source).guests and sid not in cloud.driver(dest).guests
    assert {m["status"] for m in await _records(cloud, sid)} == {"error"}
    # a suspended server: 409
    await cloud.action(sid, {"suspend": None})
    await cloud.wait_status(sid, "SUSPENDED")
    await cloud.action(sid, _live_21(dest), expect=409)


async def _slow_flavor(cloud, delay: str) -> str:
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
        "name": "slow-live", "ram": 128, "vcpus": 1, "disk": 1, "id": "slow-live"}})
    assert r.status_code == 200, r.text
    # The fake driver's copy takes this long (a Nefos-only extra spec, written past the API's checks).
    async with cloud.rt.db.reader() as s:
        fid = (await s.execute(select(Flavor.id).where(Flavor.flavorid == "slow-live"))).scalar_one()
    async with cloud.rt.db.transaction() as s:
        s.add(FlavorExtraSpec(flavor_id=fid, key="nefos:fake_live_migration_delay", value=delay))
    return "slow-live"


async def _running(cloud, sid: str, headers: dict) -> dict:
    deadline = time.monotonic() + 15
    while True:
        r = await cloud.compute.get(f"/v2.1/servers/{sid}/migrations", headers=headers)
        assert r.status_code == 200, r.text
        if r.json()["migrations"] and r.json()["migrations"][0]["status"] == "running":
            return r.json()["migrations"][0]
        assert time.monotonic() < deadline, r.text
        await asyncio.sleep(0.02)


async def test_in_progress_listing_abort_and_force_complete(cloud):
    flavor = await _slow_flavor(cloud, "30")
    if not getattr(cloud, "_live_net", None):
        cloud._live_net = await cloud.make_network(shared=True)
    server = (await cloud.boot(flavor=flavor, headers=MEMBER))["server"]
    sid = (await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER))["id"]
    source = await _host(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    await cloud.action(sid, _live_21(dest))
    assert (await cloud.server(sid, ADMIN))["status"] == "MIGRATING"
    running = await _running(cloud, sid, _v("2.24"))
    assert (running["source_compute"], running["dest_compute"]) == (source, dest)
    # abort it: the server stays on its source, the migration is cancelled
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}/migrations/{running['id']}", headers=_v("2.24"))
    assert r.status_code == 202, r.text
    assert (await _wait_idle(cloud, sid))["status"] == "ACTIVE"
    assert await _host(cloud, sid) == source and await _allocations(cloud) == [(sid, source)]
    assert (await _records(cloud, sid))[-1]["status"] == "cancelled"
    # not migrating any more: 409; an unknown migration of a migrating server: 404 / 400
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}/migrations/{running['id']}", headers=_v("2.24"))
    assert r.status_code == 409, r.text
    await cloud.action(sid, _live_21(dest))
    running = await _running(cloud, sid, _v("2.24"))
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}/migrations/999999", headers=_v("2.24"))
    assert r.status_code == 404, r.text
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/migrations/999999/action", json={"force_complete": None},
                                 headers=_v("2.22"))
    assert r.status_code == 400, r.text
    # force-complete it: it finishes now
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/migrations/{running['id']}/action",
                                 json={"force_complete": None}, headers=_v("2.22"))
    assert r.status_code == 202, r.text
    assert (await _wait_idle(cloud, sid))["status"] == "ACTIVE"
    await _check_moved(cloud, sid, dest)
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/migrations/{running['id']}/action",
                                 json={"force_complete": None}, headers=_v("2.22"))
    assert r.status_code == 409, r.text  # the server is no longer migrating


async def test_delete_during_a_live_migration_leaks_nothing(cloud):
    flavor = await _slow_flavor(cloud, "1")
    if not getattr(cloud, "_live_net", None):
        cloud._live_net = await cloud.make_network(shared=True)
    server = (await cloud.boot(flavor=flavor, headers=MEMBER))["server"]
    sid = (await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER))["id"]
    source = await _host(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    await cloud.action(sid, _live_21(dest))
    await _running(cloud, sid, _v("2.24"))
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=MEMBER)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(sid, timeout=30)
    deadline = time.monotonic() + 15
    while await _allocations(cloud) or any(sid in cloud.driver(h).guests for h in cloud.hosts):
        assert time.monotonic() < deadline, (await _allocations(cloud))
        await asyncio.sleep(0.05)


async def test_from_2_34_the_checks_run_after_the_answer(cloud):
    """Nova's async live migration: a destination the scheduler refuses (here the source itself)
    answers 202; the migration ends in error and the server is back as it was."""
    server = await _boot_active(cloud)
    sid = server["id"]
    source = await _host(cloud, sid)
    r = await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=_live(source), headers=_v("2.34"))
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 15
    while (await _records(cloud, sid))[-1]["status"] != "error":
        assert time.monotonic() < deadline, await _records(cloud, sid)
        await asyncio.sleep(0.02)
    after = await _wait_idle(cloud, sid)
    assert (after["status"], await _host(cloud, sid)) == ("ACTIVE", source)
    assert await _allocations(cloud) == [(sid, source)]
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/os-instance-actions", headers=ADMIN)
    assert r.json()["instanceActions"][0]["action"] == "live-migration"
    assert r.json()["instanceActions"][0]["message"] == "Error"


async def test_a_live_migration_its_source_lost_is_rolled_back(cloud):
    """A live migration whose cast never reached its source (or whose source restarted) is given up
    by the source's recovery, as Nova's init_host: the server back on its source, the claim on the
    destination released, the migration in error."""
    from nefos.host.compute import live_migration
    from nefos.host.compute.init_host import recover_instance
    from nefos.objects import instance as instance_obj
    server = await _boot_active(cloud)
    sid = server["id"]
    source = await _host(cloud, sid)
    dest = next(h for h in cloud.hosts if h != source)
    original = live_migration.live_migration

    async def lost(*args, **kwargs):  # the source never gets the cast
        return None
    cloud.compute_manager(source).live_migration = lost
    try:
        await cloud.action(sid, _live_21(dest))
        deadline = time.monotonic() + 15
        while len(await _allocations(cloud)) != 2:
            assert time.monotonic() < deadline, await _allocations(cloud)
            await asyncio.sleep(0.02)
    finally:
        del cloud.compute_manager(source).live_migration
    assert original is live_migration.live_migration
    instance = await instance_obj.get(cloud.rt.db, sid)
    assert instance["task_state"] == "migrating"
    await recover_instance(cloud.compute_manager(source), instance, lost=True)
    after = await _wait_idle(cloud, sid)
    assert (after["status"], await _host(cloud, sid)) == ("ACTIVE", source)
    assert await _allocations(cloud) == [(sid, source)]
    assert (await _records(cloud, sid))[-1]["status"] == "error"
    assert sid in cloud.driver(source).guests and sid not in cloud.driver(dest).guests
