"""The event stream's log on every database: entries written in the change's own transaction, and
the process's reader (api/event_hub.py) delivering them in id order, none lost, while
transactions commit out of id order (PostgreSQL and MariaDB give an id at insert, show it at
commit)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import types

import pytest
from sqlalchemy import insert, select, update

from nefos import exceptions
from nefos.control.compute.rest.event_hub import EventHub
from nefos.context import RequestContext
from nefos.db.models import StreamEvent, utcnow
from nefos.objects import actions, event_log, instance as instance_obj
from nefos.model import states
from tests.backends import BACKENDS, fresh_database, migrated
from tests.db.test_backends import make_instance

TABLE = StreamEvent.__table__
SERVER_BACKENDS = [b for b in BACKENDS if b != "sqlite"]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        found = {"sqlite": f"sqlite:///{tmp_path_factory.mktemp('events') / 'nefos.sqlite'}"}
        for backend in ("postgresql", "mysql"):
            found[backend] = stack.enter_context(fresh_database(backend))
        yield found


@pytest.fixture(params=BACKENDS)
async def db(request, urls):  # each backend's own database (BACKENDS marks the servers' ones)
    async with migrated(urls[request.param]) as database:
        yield database


def _cfg(gap_timeout: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(event_stream_poll_interval=0.01, event_stream_gap_timeout=gap_timeout)


async def _entries(db, after: int) -> list[dict]:
    return await event_log.read_after(db, after)


async def test_a_state_change_writes_its_entry_and_a_refused_one_none(db):
    start = await event_log.newest_id(db)
    uuid = await make_instance(db)
    await instance_obj.save(db, uuid, {"task_state": states.NETWORKING}, expected_task_state=states.SCHEDULING)
    with pytest.raises(exceptions.UnexpectedTaskStateError):
        await instance_obj.save(db, uuid, {"task_state": states.SPAWNING}, expected_task_state=states.SCHEDULING)
    await instance_obj.save(db, uuid, {"display_name": "renamed"})  # no state: no entry
    entries = await _entries(db, start)
    assert [(e["type"], e["server_id"], e["data"]["task_state"], e["data"]["status"]) for e in entries] == [
        ("server.updated", uuid, states.NETWORKING, "BUILD")]
    assert entries[0]["project_id"] == "p1"  # taken from the server's row


async def test_a_step_and_its_finish_name_their_server(db):
    uuid = await make_instance(db, host="h1")
    ctx = RequestContext(request_id="req-" + uuid, user_id="u1", project_id="someone-else")
    await actions.record_action(db, ctx, uuid, actions.CREATE)
    start = await event_log.newest_id(db)
    step = await actions.event_start(db, ctx, uuid, "compute_spawn", "h1")
    await actions.event_finish(db, step, result="Error")
    entries = await _entries(db, start)
    assert [(e["type"], e["name"], e["server_id"], e["host"], (e["data"] or {}).get("result"), e["project_id"])
            for e in entries] == [
        ("server.step.started", "compute_spawn", uuid, "h1", None, "p1"),
        ("server.step.finished", "compute_spawn", uuid, "h1", "Error", "p1")]


async def test_a_deleted_server_keeps_its_project(db):
    uuid = await make_instance(db, project_id="p2")
    start = await event_log.newest_id(db)
    await instance_obj.destroy(db, uuid)
    [entry] = await _entries(db, start)
    assert (entry["type"], entry["project_id"], entry["data"]["status"]) == ("server.deleted", "p2", "DELETED")


async def test_purge_keeps_the_window_and_ids_never_come_back(db):
    async with db.transaction() as s:
        await s.execute(insert(TABLE), [{"created_at": utcnow() - dt.timedelta(hours=2), "type": "host.up",
                                         "host": "old"}])
    newest = await event_log.newest_id(db)
    assert await event_log.purge(db, 3600) >= 1
    async with db.transaction() as s:
        await event_log.append(s, event_log.entry(event_log.HOST_UP, host="new"))
    assert await event_log.newest_id(db) > newest
    assert "old" not in [e["host"] for e in await _entries(db, 0)]


class _Collector:
    def __init__(self):
        self.seen: list[int] = []

    def accepts(self, entry):
        self.seen.append(entry["id"])
        return False


async def _append_in_open_transaction(db, host: str, go: asyncio.Event, inserted: asyncio.Event,
                                      rollback: bool = False):
    """Insert an entry (its id taken now), then hold the transaction open until ``go``."""
    with contextlib.suppress(RuntimeError):
        async with db.transaction() as s:
            await event_log.append(s, event_log.entry(event_log.HOST_UP, host=host))
            inserted.set()
            await go.wait()
            if rollback:
                raise RuntimeError("rolled back")


async def _wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_the_reader_waits_for_an_earlier_id_committed_later(urls, backend):
    """Transaction A takes id N and commits after B took and committed N+1: the reader delivers N,
    then N+1, never N+1 alone (a reader that did not wait for the missing id would lose N)."""
    async with migrated(urls[backend]) as db:
        hub = EventHub(db, _cfg(gap_timeout=30.0))
        collector = _Collector()
        subscriber = await hub.subscribe(collector.accepts)
        go, a_inserted = asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(_append_in_open_transaction(db, "a", go, a_inserted))
        await a_inserted.wait()
        async with db.transaction() as s:
            await event_log.append(s, event_log.entry(event_log.HOST_UP, host="b"))
        b_id = await event_log.newest_id(db)
        # B is committed and visible; the reader holds it while A's id is missing.
        await asyncio.sleep(0)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            assert b_id not in collector.seen
            await asyncio.sleep(0.02)
        go.set()
        await a
        await _wait(lambda: b_id in collector.seen)
        assert collector.seen == [b_id - 1, b_id]
        hub.unsubscribe(subscriber)
        await hub.close()


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_an_id_whose_transaction_rolled_back_is_passed_after_the_gap_timeout(urls, backend):
    async with migrated(urls[backend]) as db:
        hub = EventHub(db, _cfg(gap_timeout=0.5))
        collector = _Collector()
        await hub.subscribe(collector.accepts)
        go, inserted = asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(_append_in_open_transaction(db, "a", go, inserted, rollback=True))
        await inserted.wait()
        go.set()
        await a
        async with db.transaction() as s:
            await event_log.append(s, event_log.entry(event_log.HOST_UP, host="b"))
        b_id = await event_log.newest_id(db)
        started = time.monotonic()
        await _wait(lambda: b_id in collector.seen)
        assert time.monotonic() - started >= 0.3  # held for the gap, then passed
        assert collector.seen == [b_id]
        await hub.close()


async def test_host_liveness_is_told_once_per_change(db):
    from nefos.db.models import Service
    from nefos.objects import service_rows
    cfg = types.SimpleNamespace(service_down_time=60.0)
    host = f"h-{time.monotonic_ns()}"
    start = await event_log.newest_id(db)
    service_id = await service_rows.register(db, host, "nova-compute", "compute")  # up at once
    await service_rows.report_liveness_changes(db, cfg)  # nothing new to tell
    assert [e["type"] for e in await _entries(db, start) if e["host"] == host] == ["host.up"]
    async with db.transaction() as s:
        await s.execute(update(Service).where(Service.id == service_id).values(
            last_seen_up=utcnow() - dt.timedelta(seconds=120)))
    # Two watchers at once (two conductors): one host.down between them.
    told = await asyncio.gather(service_rows.report_liveness_changes(db, cfg),
                                service_rows.report_liveness_changes(db, cfg))
    await service_rows.report_liveness_changes(db, cfg)
    assert [e["type"] for e in await _entries(db, start) if e["host"] == host] == ["host.up", "host.down"]
    assert sum(told) >= 1
    async with db.reader() as s:
        assert (await s.execute(select(Service.reported_up).where(Service.id == service_id))).scalar() is False
