"""The scheduler's cached host states (scheduler/host_cache.py), on every database: each refresh
reads what changed through the real write paths (claims, build results, capacity, enable/disable,
forced down, delete, aggregates) and the next decision sees it; a claim a stale state loses
re-reads the node; a request the cache finds no room for is decided again on everything read
afresh.

Each test's hosts have names of their own (the module's tests share one database), and the
decisions ask for a zone of their own so no other test's host can take them.
"""

from __future__ import annotations

import datetime as dt
import types
import uuid

import pytest
from sqlalchemy import select, update

from nefos import exceptions
from nefos.control.compute import aggregates, services
from nefos.config import Config
from nefos.db.migrate import upgrade
from nefos.db.models import ComputeNode, Service, utcnow
from nefos.db.session import Database
from nefos.objects import allocations, compute_nodes, service_rows
from nefos.control.scheduler import host_cache
from nefos.control.scheduler.host_cache import HostStateCache
from nefos.control.scheduler.manager import SchedulerManager
from tests.backends import BACKENDS, fresh_database, migrated

LONG_AGO = dt.timedelta(hours=1)


@pytest.fixture(scope="module", params=BACKENDS)
def db_url(request, tmp_path_factory):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'nefos.sqlite'}"
        return
    with fresh_database(request.param) as url:
        yield url


@pytest.fixture
async def db(db_url):
    async with migrated(db_url) as database:
        yield database


@pytest.fixture
def cfg():
    return Config()


async def add_host(db, *, zone: str | None = None, last_seen_up: dt.datetime | None = None,
                   memory_mb: int = 8192, age: dt.timedelta = LONG_AGO) -> tuple[str, int, int]:
    """A compute host registered ``age`` ago, alive now: its name, service id and node id."""
    name = f"hc-{uuid.uuid4().hex[:10]}"
    old = utcnow() - age
    async with db.transaction() as s:
        svc = Service(uuid=str(uuid.uuid4()), host=name, binary="nova-compute", topic="compute",
                      last_seen_up=last_seen_up or utcnow(), report_count=1, availability_zone=zone,
                      created_at=old)
        node = ComputeNode(uuid=str(uuid.uuid4()), host=name, hypervisor_hostname=f"{name}.node", vcpus=8,
                           memory_mb=memory_mb, local_gb=100, created_at=old)
        s.add(svc)
        s.add(node)
        await s.flush()
        return name, svc.id, node.id


async def states_by_host(cache: HostStateCache, **kwargs) -> dict:
    return {s.host: s for s in await cache.host_states(**kwargs)}


async def write_unseen(db, node_id: int, **values) -> None:
    """Change the node as a write the refresh's margin missed would (stamped long ago)."""
    async with db.transaction() as s:
        await s.execute(update(ComputeNode).where(ComputeNode.id == node_id).values(
            **values, updated_at=utcnow() - LONG_AGO))


async def claim(db, consumer: str, node_id: int, vcpus: int = 1, memory_mb: int = 512) -> bool:
    async with db.transaction() as s:
        return await allocations.claim(s, consumer, node_id, vcpus=vcpus, memory_mb=memory_mb, disk_gb=1)


# Nodes ------------------------------------------------------------------------------------------

async def test_claims_releases_build_results_and_capacity_are_seen_by_the_next_refresh(db, cfg):
    name, _svc, node_id = await add_host(db)
    cache = HostStateCache(db, cfg)
    assert (await states_by_host(cache))[name].vcpus_used == 0
    consumer = str(uuid.uuid4())
    assert await claim(db, consumer, node_id, vcpus=3, memory_mb=1024)
    state = (await states_by_host(cache))[name]
    assert cache.last_refresh["full"] is False
    assert (state.vcpus_used, state.memory_mb_used) == (3, 1024)
    await allocations.release(db, consumer)
    await compute_nodes.record_build_result(db, node_id, success=False)
    await compute_nodes.update_capacity(db, name, f"{name}.node", None, {"vcpus": 16, "memory_mb": 8192})
    state = (await states_by_host(cache))[name]
    assert cache.last_refresh["full"] is False
    assert (state.vcpus_used, state.memory_mb_used, state.failed_builds, state.vcpus) == (0, 0, 1, 16)


async def test_a_new_host_is_seen_and_a_deleted_one_drops(db, cfg):
    cache = HostStateCache(db, cfg)
    await cache.host_states()
    name, svc_id, _node = await add_host(db, age=dt.timedelta(0))
    assert name in await states_by_host(cache)
    assert cache.last_refresh["full"] is False
    await services.delete_service(db, svc_id)
    assert name not in await states_by_host(cache)
    assert cache.last_refresh["full"] is False


async def test_a_service_registered_again_after_its_delete_brings_its_new_node_back(db, cfg):
    name, svc_id, _node = await add_host(db)
    cache = HostStateCache(db, cfg)
    await cache.host_states()
    await services.delete_service(db, svc_id)
    assert name not in await states_by_host(cache)
    await service_rows.register(db, name, "nova-compute", "compute")
    await compute_nodes.update_capacity(db, name, f"{name}.node", None, {"vcpus": 4, "memory_mb": 2048})
    state = (await states_by_host(cache))[name]
    assert cache.last_refresh["full"] is False
    assert (state.vcpus, state.service_up, state.service_disabled) == (4, True, False)


async def test_an_unchanged_capacity_report_writes_nothing(db):
    name, _svc, node_id = await add_host(db)
    await compute_nodes.update_capacity(db, name, f"{name}.node", None, {"vcpus": 8, "memory_mb": 8192})
    async with db.reader() as s:
        assert (await s.execute(select(ComputeNode.updated_at).where(ComputeNode.id == node_id))).scalar() is None


# Services -----------------------------------------------------------------------------------------

async def test_disable_force_down_and_their_undoing_are_seen_by_the_next_refresh(db, cfg):
    name, svc_id, _node = await add_host(db)
    cache = HostStateCache(db, cfg)
    state = (await states_by_host(cache))[name]
    assert state.service_up and not state.service_disabled
    await services.set_disabled(db, name, "nova-compute", True, "maintenance")
    assert (await states_by_host(cache))[name].service_disabled
    await services.set_disabled(db, name, "nova-compute", False)
    assert not (await states_by_host(cache))[name].service_disabled
    row = await services.get_service(db, cfg, svc_id)
    await services.update_by_uuid(db, cfg, row["uuid"], {"forced_down": True})
    assert not (await states_by_host(cache))[name].service_up
    await services.set_forced_down(db, name, "nova-compute", False)
    assert (await states_by_host(cache))[name].service_up
    await service_rows.set_host_enabled(db, name, False, "hypervisor gone")
    assert (await states_by_host(cache))[name].service_disabled
    await service_rows.set_host_enabled(db, name, True)
    assert not (await states_by_host(cache))[name].service_disabled
    assert cache.last_refresh["full"] is False


async def test_a_host_heartbeating_again_is_up_at_the_next_refresh(db, cfg):
    name, svc_id, _node = await add_host(
        db, last_seen_up=utcnow() - dt.timedelta(seconds=cfg.service_down_time + 30))
    cache = HostStateCache(db, cfg)
    assert not (await states_by_host(cache))[name].service_up
    await service_rows.heartbeat(db, svc_id)
    assert (await states_by_host(cache))[name].service_up
    assert cache.last_refresh["full"] is False


async def test_a_heartbeat_leaves_updated_at_and_the_api_shows_it(db, cfg):
    _name, svc_id, _node = await add_host(db)
    await service_rows.heartbeat(db, svc_id)
    async with db.reader() as s:
        row = (await s.execute(select(Service).where(Service.id == svc_id))).scalar_one()
    assert row.updated_at is None and row.report_count == 2
    assert (await services.get_service(db, cfg, svc_id))["updated_at"] == row.last_seen_up


async def test_a_host_that_stops_heartbeating_is_down_once_service_down_time_passed(db, cfg, monkeypatch):
    name, _svc, _node = await add_host(db)
    cache = HostStateCache(db, cfg)
    assert (await states_by_host(cache))[name].service_up
    later = utcnow() + dt.timedelta(seconds=cfg.service_down_time + 1)
    monkeypatch.setattr(host_cache, "utcnow", lambda: later)
    assert not (await states_by_host(cache))[name].service_up
    assert cache.last_refresh["full"] is False


# Aggregates ---------------------------------------------------------------------------------------

async def test_aggregate_changes_are_seen_by_the_next_refresh(db, cfg):
    name, _svc, _node = await add_host(db)
    cache = HostStateCache(db, cfg)
    assert (await states_by_host(cache))[name].availability_zone == cfg.default_availability_zone
    agg = await aggregates.create_aggregate(db, f"agg-{uuid.uuid4().hex[:8]}", f"az-{name}")
    await aggregates.add_host(db, agg["id"], name)
    state = (await states_by_host(cache))[name]
    assert state.availability_zone == f"az-{name}" and state.aggregates == [{"availability_zone": f"az-{name}"}]
    # Changes in quick succession (within one second: MySQL's DATETIME keeps whole seconds).
    for value in ("a", "b", "c"):
        await aggregates.update_metadata(db, agg["id"], {"ssd": value})
        assert (await states_by_host(cache))[name].aggregates == [
            {"availability_zone": f"az-{name}", "ssd": value}]
    await aggregates.remove_host(db, agg["id"], name)
    state = (await states_by_host(cache))[name]
    assert state.aggregates == [] and state.availability_zone == cfg.default_availability_zone
    assert cache.last_refresh["full"] is False


# Only what changed is read ------------------------------------------------------------------------

async def test_a_refresh_reads_only_the_rows_that_changed(tmp_path, cfg):
    db = Database(f"sqlite:///{tmp_path / 'nefos.sqlite'}")
    try:
        await upgrade(db)
        hosts = [await add_host(db) for _ in range(20)]
        cache = HostStateCache(db, cfg)
        assert len(await cache.host_states()) == 20
        assert cache.last_refresh == {"full": True, "nodes": 20, "services": 20, "aggregates": True}
        await cache.host_states()
        assert cache.last_refresh == {"full": False, "nodes": 0, "services": 0, "aggregates": False}
        for _name, svc_id, _node in hosts:
            await service_rows.heartbeat(db, svc_id)
        assert await claim(db, str(uuid.uuid4()), hosts[3][2])
        await services.set_disabled(db, hosts[5][0], "nova-compute", True)
        await cache.host_states()
        assert cache.last_refresh == {"full": False, "nodes": 1, "services": 1, "aggregates": False}
    finally:
        await db.dispose()


async def test_everything_is_read_again_after_full_reload_seconds(db, cfg):
    name, _svc, node_id = await add_host(db)
    cache = HostStateCache(db, cfg)
    await cache.host_states()
    await write_unseen(db, node_id, failed_builds=7)
    assert (await states_by_host(cache))[name].failed_builds == 0
    cache._loaded_at -= host_cache.FULL_RELOAD_SECONDS  # as if that long had passed
    assert (await states_by_host(cache))[name].failed_builds == 7
    assert cache.last_refresh["full"] is True


# Decisions ----------------------------------------------------------------------------------------

def request(zone: str) -> dict:
    return {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 1, "extra_specs": {}},
            "project_id": "p1", "scheduler_hints": {}, "availability_zone": zone}


async def test_a_claim_a_stale_state_loses_re_reads_the_node(db, cfg):
    zone = f"az-{uuid.uuid4().hex[:8]}"
    big, _svc, big_node = await add_host(db, zone=zone, memory_mb=16384)  # most free RAM: weighed first
    small, _svc, _node = await add_host(db, zone=zone, memory_mb=4096)
    scheduler = SchedulerManager(types.SimpleNamespace(db=db, cfg=cfg))
    await scheduler.host_cache.host_states()
    await write_unseen(db, big_node, memory_mb_used=16384 * 3 // 2)  # full, unbeknown to the cache
    (selection,) = await scheduler.select_destinations(None, request(zone), [str(uuid.uuid4())])
    assert selection["host"] == small
    cached = {s.host: s for s in scheduler.host_cache._ordered}
    assert cached[big].memory_mb_used == 16384 * 3 // 2  # healed by re-reading that node alone
    assert scheduler.host_cache.last_refresh["full"] is False


async def test_no_host_fitting_on_stale_states_is_decided_again_on_everything_read_afresh(db, cfg):
    zone = f"az-{uuid.uuid4().hex[:8]}"
    name, _svc, node_id = await add_host(db, zone=zone)
    scheduler = SchedulerManager(types.SimpleNamespace(db=db, cfg=cfg))
    await write_unseen(db, node_id, memory_mb_used=8192 * 3 // 2)
    await scheduler.host_cache.host_states()  # the cache sees the node full
    await write_unseen(db, node_id, memory_mb_used=0)  # freed, unbeknown to the cache
    (selection,) = await scheduler.select_destinations(None, request(zone), [str(uuid.uuid4())])
    assert selection["host"] == name
    assert scheduler.host_cache.last_refresh["full"] is True


async def test_a_host_disabled_between_decisions_takes_no_more(db, cfg):
    zone = f"az-{uuid.uuid4().hex[:8]}"
    name, _svc, _node = await add_host(db, zone=zone)
    scheduler = SchedulerManager(types.SimpleNamespace(db=db, cfg=cfg))
    (selection,) = await scheduler.select_destinations(None, request(zone), [str(uuid.uuid4())])
    assert selection["host"] == name
    await services.set_disabled(db, name, "nova-compute", True)
    with pytest.raises(exceptions.NoValidHost):
        await scheduler.select_destinations(None, request(zone), [str(uuid.uuid4())])
