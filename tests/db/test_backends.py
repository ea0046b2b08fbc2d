"""The persistence invariants on every supported database: SQLite, PostgreSQL, MySQL/MariaDB.

Each server backend gets a fresh database for the test session (created here,
dropped at the end). Servers come from ``NEFOS_TEST_PG_URL`` /
``NEFOS_TEST_MYSQL_URL`` (admin URLs, defaults: postgres@ / root@ on
127.0.0.1); ``scripts/run-tests.sh`` starts them. Nothing here skips: an
unreachable server fails.
"""

from __future__ import annotations


import asyncio
import uuid

import pytest
from sqlalchemy import func, insert, select, text

from nefos import exceptions
from nefos.config import Config
from nefos.db import listing
from nefos.db.migrate import upgrade
from nefos.db.models import Instance, QuotaUsage
from nefos.db.retry import retrying
from nefos.db.session import Database, after_commit, insert_ignoring_duplicate, savepoint
from nefos.objects import instance as instance_obj
from nefos.objects import quotas
from nefos.model import states
from tests.backends import BACKENDS, fresh_database, migrated

@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'nefos.sqlite'}"


@pytest.fixture(scope="session")
def postgresql_url():
    with fresh_database("postgresql") as url:
        yield url


@pytest.fixture(scope="session")
def mysql_url():
    with fresh_database("mysql") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request):
    """The URL of a migrated-or-empty database of each backend (one per session)."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
async def db(db_url):
    async with migrated(db_url) as database:
        yield database


async def make_instance(db: Database, **fields) -> str:
    uid = str(uuid.uuid4())
    values = dict(uuid=uid, project_id="p1", user_id="u1", vm_state=states.BUILDING,
                  task_state=states.SCHEDULING, display_name="vm")
    values.update(fields)
    async with db.transaction() as s:
        s.add(Instance(**values))
    return uid


# Schema ------------------------------------------------------------------------

async def test_migrations_reach_head_and_match_the_models(db):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from nefos.db.models import Base

    def _check(connection):
        ctx = MigrationContext.configure(connection, opts={"compare_type": True})
        return ctx.get_current_revision(), compare_metadata(ctx, Base.metadata)

    await upgrade(db)  # running it again is a no-op
    async with db.engine.connect() as conn:
        revision, diff = await conn.run_sync(_check)
    assert revision is not None
    assert diff == []


async def test_round_trip_of_json_unicode_and_datetimes(db):
    name = "ünïcødé 名前 🚀"
    uid = await make_instance(db, display_name=name, metadata_={"k": "v", "n": [1, 2]},
                              system_metadata={"image_os": "cirros"}, locked=True)
    got = await instance_obj.get(db, uid)
    assert got["display_name"] == name
    assert got["metadata"] == {"k": "v", "n": [1, 2]}
    assert got["system_metadata"] == {"image_os": "cirros"}
    assert got["security_groups"] == [] and got["network_info"] == []
    assert got["locked"] is True and got["vcpus"] == 0
    assert got["created_at"]


# Instance compare-and-swap -----------------------------------------------------

async def test_save_with_expected_task_state_succeeds(db):
    uid = await make_instance(db)
    got = await instance_obj.save(db, uid, {"task_state": states.SPAWNING, "host": "c1"},
                                  expected_task_state=states.SCHEDULING)
    assert got["task_state"] == states.SPAWNING and got["host"] == "c1"
    got = await instance_obj.save(db, uid, {"task_state": None, "vm_state": states.ACTIVE},
                                  expected_task_state=[states.NETWORKING, states.SPAWNING])
    assert got["task_state"] is None and got["vm_state"] == states.ACTIVE
    assert (await instance_obj.get(db, uid))["vm_state"] == states.ACTIVE


async def test_save_with_unchanged_values_still_matches(db):
    """A matched UPDATE that changes nothing counts as a match (MySQL reports changed rows
    unless the client asks for found rows)."""
    uid = await make_instance(db, host="c1")
    for _ in range(3):
        got = await instance_obj.save(db, uid, {"host": "c1", "task_state": states.SCHEDULING},
                                      expected_task_state=states.SCHEDULING)
        assert got["host"] == "c1"
    async with db.transaction() as s:
        # Same values and same updated_at: nothing changes, one row still matches.
        row = (await s.execute(select(Instance).where(Instance.uuid == uid))).scalar_one()
        result = await s.execute(
            Instance.__table__.update().where(Instance.uuid == uid)
            .values(host=row.host, updated_at=row.updated_at))
        assert result.rowcount == 1


async def test_save_with_mismatched_task_state_raises(db):
    uid = await make_instance(db, task_state=states.SPAWNING)
    with pytest.raises(exceptions.UnexpectedTaskStateError) as info:
        await instance_obj.save(db, uid, {"task_state": None, "vm_state": states.ACTIVE},
                                expected_task_state=states.SCHEDULING)
    assert not isinstance(info.value, exceptions.UnexpectedDeletingTaskStateError)
    got = await instance_obj.get(db, uid)
    assert got["task_state"] == states.SPAWNING and got["vm_state"] == states.BUILDING


async def test_save_when_deleting_raises_the_deleting_error(db):
    uid = await make_instance(db, task_state=states.DELETING)
    with pytest.raises(exceptions.UnexpectedDeletingTaskStateError):
        await instance_obj.save(db, uid, {"task_state": None, "vm_state": states.ACTIVE},
                                expected_task_state=[states.SPAWNING])
    assert (await instance_obj.get(db, uid))["task_state"] == states.DELETING


async def test_save_expected_none_matches_null(db):
    uid = await make_instance(db, task_state=None, vm_state=states.ACTIVE)
    got = await instance_obj.save(db, uid, {"task_state": states.REBOOTING},
                                  expected_task_state=None)
    assert got["task_state"] == states.REBOOTING
    with pytest.raises(exceptions.UnexpectedTaskStateError):
        await instance_obj.save(db, uid, {"task_state": states.POWERING_OFF},
                                expected_task_state=None)
    got = await instance_obj.save(db, uid, {"task_state": None},
                                  expected_task_state=[None, states.REBOOTING])
    assert got["task_state"] is None


async def test_save_of_missing_or_deleted_instance_raises_not_found(db):
    with pytest.raises(exceptions.InstanceNotFound):
        await instance_obj.save(db, str(uuid.uuid4()), {"host": "x"}, expected_task_state=None)
    uid = await make_instance(db)
    async with db.transaction() as s:
        await s.execute(Instance.__table__.update().where(Instance.uuid == uid)
                        .values(deleted=Instance.__table__.c.id))
    with pytest.raises(exceptions.InstanceNotFound):
        await instance_obj.save(db, uid, {"host": "x"})


async def test_concurrent_compare_and_swap_has_one_winner(db):
    uid = await make_instance(db)

    async def claim(host):
        try:
            await instance_obj.save(db, uid, {"task_state": states.SPAWNING, "host": host},
                                    expected_task_state=states.SCHEDULING)
            return host
        except exceptions.UnexpectedTaskStateError:
            return None

    winners = [h for h in await asyncio.gather(*[claim(f"c{i}") for i in range(20)]) if h]
    assert len(winners) == 1
    assert (await instance_obj.get(db, uid))["host"] == winners[0]


# Quotas ------------------------------------------------------------------------

async def test_quota_consume_under_concurrency_never_overshoots(db):
    project = f"p-{uuid.uuid4().hex}"
    cfg = Config(quota_instances=10, quota_cores=40, quota_ram=-1)

    async def request():
        try:
            async with db.transaction() as s:
                await quotas.consume(s, cfg, project, {"instances": 1, "cores": 2, "ram": 512})
            return True
        except exceptions.OverQuota as exc:
            assert "instances" in exc.kwargs["overs"]
            return False

    results = await asyncio.gather(*[request() for _ in range(50)])
    assert results.count(True) == 10
    assert results.count(False) == 40
    async with db.reader() as s:
        used = await quotas.usages(s, project)
    assert used["instances"] == 10 and used["cores"] == 20 and used["ram"] == 5120

    # Released usage can be consumed again; usage never goes below zero.
    async with db.transaction() as s:
        await quotas.release(s, project, {"instances": 3, "cores": 6, "ram": 1536})
    async with db.transaction() as s:
        await quotas.consume(s, cfg, project, {"instances": 3})
    with pytest.raises(exceptions.OverQuota):
        async with db.transaction() as s:
            await quotas.consume(s, cfg, project, {"instances": 1})
    async with db.transaction() as s:
        await quotas.release(s, project, {"instances": 100})
    async with db.reader() as s:
        assert (await quotas.usages(s, project))["instances"] == 0


async def test_quota_consume_where_some_usage_rows_are_new_never_deadlocks(db):
    """A project that already uses one resource (its row exists) asks for two it has never used:
    every request locks the rows in one order. Creating the missing rows after locking the
    existing one would let PostgreSQL report deadlocks (500s on server creates)."""
    for _ in range(10):
        project = f"p-{uuid.uuid4().hex}"
        cfg = Config(quota_instances=10, quota_cores=40, quota_ram=-1)
        async with db.transaction() as s:
            await quotas.consume(s, cfg, project, {"ram": 1})

        async def request():
            try:
                async with db.transaction() as s:
                    await quotas.consume(s, cfg, project, {"instances": 1, "cores": 2, "ram": 512})
                return True
            except exceptions.OverQuota:
                return False

        results = await asyncio.gather(*[request() for _ in range(30)])
        assert results.count(True) == 10
        async with db.reader() as s:
            used = await quotas.usages(s, project)
        assert (used["instances"], used["cores"], used["ram"]) == (10, 20, 5121)


async def test_quota_over_one_resource_consumes_nothing(db):
    project = f"p-{uuid.uuid4().hex}"
    cfg = Config(quota_instances=10, quota_cores=4)
    with pytest.raises(exceptions.OverQuota) as info:
        async with db.transaction() as s:
            await quotas.consume(s, cfg, project, {"instances": 1, "cores": 8})
    assert info.value.kwargs["overs"] == ["cores"]
    async with db.reader() as s:
        used = await quotas.usages(s, project)
    assert used["instances"] == 0 and used["cores"] == 0


async def test_quota_rows_created_once_under_concurrency(db):
    """Racing first requests of a new project create exactly one usage row per resource."""
    project = f"p-{uuid.uuid4().hex}"
    cfg = Config(quota_instances=-1, quota_cores=-1, quota_ram=-1)

    async def request():
        async with db.transaction() as s:
            await quotas.consume(s, cfg, project, {"instances": 1, "cores": 1, "ram": 1})

    await asyncio.gather(*[request() for _ in range(30)])
    async with db.reader() as s:
        rows = (await s.execute(select(QuotaUsage.resource, func.count()).where(
            QuotaUsage.project_id == project).group_by(QuotaUsage.resource))).all()
        used = await quotas.usages(s, project)
    assert dict(rows) == {"instances": 1, "cores": 1, "ram": 1}
    assert used["instances"] == 30 and used["ram"] == 30


async def test_rolled_back_transaction_takes_its_usage_with_it(db):
    project = f"p-{uuid.uuid4().hex}"
    cfg = Config(quota_instances=5)
    with pytest.raises(RuntimeError):
        async with db.transaction() as s:
            await quotas.consume(s, cfg, project, {"instances": 2})
            raise RuntimeError("create failed after consuming quota")
    async with db.reader() as s:
        assert (await quotas.usages(s, project))["instances"] == 0


async def test_backend_is_the_one_asked_for(db, db_url):
    async with db.reader() as s:
        dialect = s.bind.dialect.name
        assert (await s.execute(text("SELECT 1"))).scalar() == 1
    if dialect != "sqlite":
        # Both servers run transactions the same way: each statement sees what is committed.
        async with db.engine.connect() as conn:
            assert await conn.get_isolation_level() == "READ COMMITTED"
    assert dialect == {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql"}[
        db_url.split(":")[0]]


# The session plumbing every module relies on -------------------------------------

USAGES = QuotaUsage.__table__


async def _usage_rows(db: Database, project: str) -> dict[str, int]:
    async with db.reader() as s:
        rows = (await s.execute(select(USAGES.c.resource, USAGES.c.in_use)
                                .where(USAGES.c.project_id == project))).all()
    return dict(rows)


async def test_after_commit_runs_once_the_transaction_committed_and_never_after_a_rollback(db):
    calls: list[str] = []
    async with db.transaction() as s:
        after_commit(s, lambda: calls.append("committed"))
        await s.execute(insert(USAGES).values(project_id=f"p-{uuid.uuid4().hex}", resource="ram", in_use=1))
        assert calls == []  # not before the commit
    assert calls == ["committed"]
    with pytest.raises(RuntimeError):
        async with db.transaction() as s:
            after_commit(s, lambda: calls.append("rolled back"))
            raise RuntimeError("the change failed")
    assert calls == ["committed"]


async def test_savepoint_undoes_only_its_own_block(db):
    project = f"p-{uuid.uuid4().hex}"
    async with db.transaction() as s:
        await s.execute(insert(USAGES).values(project_id=project, resource="ram", in_use=1))
        with pytest.raises(RuntimeError):
            async with savepoint(s):
                await s.execute(insert(USAGES).values(project_id=project, resource="cores", in_use=2))
                raise RuntimeError("this part failed")
        await s.execute(insert(USAGES).values(project_id=project, resource="instances", in_use=3))
    assert await _usage_rows(db, project) == {"ram": 1, "instances": 3}


async def test_a_duplicate_key_insert_is_refused_without_breaking_the_transaction(db):
    project = f"p-{uuid.uuid4().hex}"
    async with db.transaction() as s:
        assert await insert_ignoring_duplicate(s, USAGES, {"project_id": project, "resource": "ram", "in_use": 1})
        assert not await insert_ignoring_duplicate(s, USAGES, {"project_id": project, "resource": "ram",
                                                               "in_use": 7})
        await s.execute(insert(USAGES).values(project_id=project, resource="cores", in_use=2))
    assert await _usage_rows(db, project) == {"ram": 1, "cores": 2}


async def test_a_core_statement_sees_what_the_orm_added_earlier_in_the_transaction(db):
    uid = str(uuid.uuid4())
    async with db.transaction() as s:
        s.add(Instance(uuid=uid, project_id="p1", user_id="u1", vm_state=states.BUILDING, display_name="vm"))
        table = Instance.__table__
        assert (await s.execute(select(func.count()).select_from(table).where(table.c.uuid == uid))).scalar() == 1


async def test_a_reader_sees_commits_made_after_an_earlier_reader_left_a_result_half_read(db):
    """SQLite readers share held connections: a result read only in part must not leave its
    connection on an old snapshot for the next reader."""
    project = f"p-{uuid.uuid4().hex}"
    async with db.transaction() as s:
        for resource in ("ram", "cores", "instances"):
            await s.execute(insert(USAGES).values(project_id=project, resource=resource, in_use=1))
    for _ in range(3):  # whichever held connection the next reader gets
        async with db.reader() as s:
            result = await s.execute(select(USAGES.c.resource).where(USAGES.c.project_id == project))
            next(iter(result))  # one row of three, and the session ends
    async with db.transaction() as s:
        await s.execute(insert(USAGES).values(project_id=project, resource="key_pairs", in_use=1))
    for _ in range(3):
        assert len(await _usage_rows(db, project)) == 4


async def test_a_snapshot_reader_sees_one_snapshot_and_a_plain_reader_each_commit(db):
    """``reader(snapshot=True)``: every statement of the session sees the database as it was at its
    first read (the scheduler reads its hosts, their services and aggregates in several statements:
    one view of them); a plain reader sees each commit as soon as it is made."""
    project = f"p-{uuid.uuid4().hex}"
    async with db.transaction() as s:
        await s.execute(insert(USAGES).values(project_id=project, resource="ram", in_use=1))
    count = select(func.count()).select_from(USAGES).where(USAGES.c.project_id == project)
    async with db.reader(snapshot=True) as snap:
        assert (await snap.execute(count)).scalar_one() == 1
        async with db.transaction() as s:  # committed while the snapshot reader is open
            await s.execute(insert(USAGES).values(project_id=project, resource="cores", in_use=1))
        assert (await snap.execute(count)).scalar_one() == 1
    async with db.reader() as plain:
        assert (await plain.execute(count)).scalar_one() == 2
        async with db.transaction() as s:
            await s.execute(insert(USAGES).values(project_id=project, resource="instances", in_use=1))
        assert (await plain.execute(count)).scalar_one() == 3


# Server list sorting -----------------------------------------------------------

async def test_server_list_order_and_marker_paging_agree_with_nulls(db):
    """NULL sorts lowest on every backend, and keyset paging from each row walks the same order."""
    project = uuid.uuid4().hex
    names = {await make_instance(db, project_id=project, key_name=k, display_name=n): n
             for k, n in (("k2", "a"), (None, "b"), ("k1", "c"), (None, "d"))}
    q = select(instance_obj.INSTANCES.c.uuid).where(instance_obj.INSTANCES.c.project_id == project)
    for direction, expected in (("asc", ["b", "d", "c", "a"]), ("desc", ["a", "c", "d", "b"])):
        order = instance_obj.list_sort_order(["key_name"], [direction])
        async with db.reader() as s:
            full = [names[u] for u in (await s.execute(
                q.order_by(*listing.order_by(order)))).scalars()]
        assert full == expected, direction
        walked, marker = [], None
        while True:
            page = q.order_by(*listing.order_by(order)).limit(1)
            if marker is not None:
                page = page.where(listing.after(order, marker))
            async with db.reader() as s:
                row = (await s.execute(page)).scalar_one_or_none()
                if row is None:
                    break
                marker = dict((await s.execute(select(*(k.expression.label(k.name) for k in order)).where(
                    instance_obj.INSTANCES.c.uuid == row))).mappings().one())
            walked.append(names[row])
        assert walked == expected, direction


async def _deadlocking_pair(db, wrap) -> list:
    """Two transactions that lock two rows in opposite orders, each holding its first row when it
    asks for the second (the database must break the cycle); ``wrap`` runs each transaction."""
    project = f"p-{uuid.uuid4().hex}"
    async with db.transaction() as s:
        for resource in ("a", "b"):
            await s.execute(insert(QuotaUsage), {"project_id": project, "resource": resource, "in_use": 0})
    holding = [asyncio.Event(), asyncio.Event()]

    def bump(resource):
        return text("UPDATE quota_usages SET in_use = in_use + 1 WHERE project_id = :p AND resource = :r"
                    ).bindparams(p=project, r=resource)

    async def one(me: int, first: str, second: str) -> None:
        async with db.transaction() as s:
            await s.execute(bump(first))
            holding[me].set()
            await holding[1 - me].wait()  # the other holds its first row too (on a retry: at once)
            await s.execute(bump(second))

    results = await asyncio.gather(wrap(lambda: one(0, "a", "b")), wrap(lambda: one(1, "b", "a")),
                                   return_exceptions=True)
    async with db.reader() as s:
        used = dict((await s.execute(select(QuotaUsage.resource, QuotaUsage.in_use).where(
            QuotaUsage.project_id == project))).all())
    return results, used


@pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres),
                                    pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
async def test_a_transaction_rolled_back_for_a_deadlock_is_run_again(db):
    from nefos.db.retry import is_contention, retrying

    async def once(txn):
        await txn()

    async def with_retries(txn):
        async for attempt in retrying():
            with attempt:
                await txn()

    results, used = await _deadlocking_pair(db, once)  # the database really breaks a deadlock here
    assert sum(isinstance(r, Exception) and is_contention(r) for r in results) == 1, results
    results, used = await _deadlocking_pair(db, with_retries)
    assert results == [None, None] and used == {"a": 2, "b": 2}, (results, used)


async def test_a_build_request_is_claimed_by_one_conductor(db):
    """Twenty conductors reach for the same build request at once: one gets it."""
    from nefos.context import RequestContext
    from nefos.objects import build_requests
    async with db.transaction() as s:
        request = await build_requests.add(s, RequestContext(), [str(uuid.uuid4())], {"num_instances": 1},
                                           {"admin_password": "never stored", "image": {"id": "i"}})
    claimers = [f"conductor-{i}/{1000 + i}/t" for i in range(20)]
    claims = await asyncio.gather(*[build_requests.claim(db, request, 60, c) for c in claimers])
    assert claims.count(False) == 1 and claims.count(None) == 19  # taken once, first hand
    async with db.reader() as s:
        stored = (await s.execute(text("SELECT build_args FROM build_requests WHERE id = :i").bindparams(
            i=request))).scalar_one()
    assert "never stored" not in str(stored)
    # Claimed: not stranded while its lease runs (its holder runs on another host, unseen from here).
    assert await build_requests.stranded(db, 0, "elsewhere/1/t") == []
    await build_requests.finish(db, request)


async def test_a_recount_racing_claims_and_releases_loses_none_of_them(db):
    """A host's start-up recount of its usage while claims and releases on it commit: the counters
    end equal to the allocations (a recount that summed before locking the node overwrote claims
    committed in between)."""
    from nefos.db.models import Allocation, ComputeNode
    from nefos.objects import allocations
    async with db.transaction() as s:
        node = ComputeNode(uuid=str(uuid.uuid4()), host=f"h-{uuid.uuid4().hex[:8]}", hypervisor_hostname="n",
                           vcpus=1000, memory_mb=10 ** 6, local_gb=10 ** 4)
        s.add(node)
        await s.flush()
        node_id = node.id
    consumers = [str(uuid.uuid4()) for _ in range(40)]

    async def claim(consumer):
        async for attempt in retrying():
            with attempt:
                async with db.transaction() as s:
                    assert await allocations.claim(s, consumer, node_id, vcpus=1, memory_mb=10, disk_gb=1)

    async def recount():
        async for attempt in retrying():
            with attempt:
                async with db.transaction() as s:
                    await allocations.recount(s, node_id)

    await asyncio.gather(*[claim(c) for c in consumers[:20]])
    work = [claim(c) for c in consumers[20:]] + [allocations.release(db, c) for c in consumers[:10]]
    work += [recount() for _ in range(10)]
    await asyncio.gather(*work)
    async with db.reader() as s:
        row = (await s.execute(select(ComputeNode).where(ComputeNode.id == node_id))).scalar_one()
        held = (await s.execute(select(func.count(Allocation.id)).where(
            Allocation.compute_node_id == node_id))).scalar_one()
    assert held == 30
    assert (row.vcpus_used, row.memory_mb_used, row.local_gb_used, row.running_vms) == (30, 300, 30, 30)


async def test_actions_whose_host_never_finished_them_are_finished_as_their_steps_ended(db):
    """A host killed (or its call lost) between its last step and finishing the action: a conductor
    finishes it once every step ended longer ago than the cutoff and the server is in no task:
    failed when a step failed. One with a step under way, a recent step, or a server still in a
    task, is left; the action of a request that never reached a host is finished as failed."""
    import datetime as dt

    from nefos.db.models import InstanceAction, InstanceActionEvent, utcnow
    from nefos.objects import actions

    idle = await make_instance(db, vm_state=states.ACTIVE, task_state=None)
    busy = await make_instance(db, vm_state=states.ACTIVE, task_state=states.REBOOTING)
    long_ago, lately = utcnow() - dt.timedelta(seconds=600), utcnow() - dt.timedelta(seconds=5)

    async def action(instance: str, *events: tuple) -> int:
        async with db.transaction() as s:
            row = InstanceAction(action="reboot", instance_uuid=instance, request_id=f"req-{uuid.uuid4()}",
                                 start_time=long_ago)
            s.add(row)
            await s.flush()
            for finish_time, result in events:
                s.add(InstanceActionEvent(action_id=row.id, event="compute_reboot_instance", start_time=long_ago,
                                          finish_time=finish_time, result=result))
            return row.id

    succeeded = await action(idle, (long_ago, "Success"), (long_ago, "Success"))
    failed = await action(idle, (long_ago, "Success"), (long_ago, "Error"))
    recent = await action(idle, (long_ago, "Success"), (lately, "Success"))
    under_way = await action(idle, (long_ago, "Success"), (None, None))
    in_a_task = await action(busy, (long_ago, "Success"))
    never_reached = await action(idle)
    finished = await actions.finish_abandoned(db, dt.timedelta(seconds=120), steps_ended=dt.timedelta(seconds=60))
    assert sorted(finished) == sorted([succeeded, failed, never_reached])
    async with db.reader() as s:
        rows = {r.id: (r.finish_time is not None, r.message)
                for r in (await s.execute(select(InstanceAction))).scalars()}
    assert rows[succeeded] == (True, None)
    assert rows[failed] == (True, "Error")
    assert rows[never_reached] == (True, "Error")
    assert rows[recent] == rows[under_way] == rows[in_a_task] == (False, None)
    assert await actions.finish_abandoned(db, dt.timedelta(seconds=120), steps_ended=dt.timedelta(seconds=60)) == []


async def test_a_restarted_host_ends_the_steps_its_killed_process_left_open(db):
    """Only that host's open steps end (as failed, with the reason); an action ends with them when
    its server is in no task and no other step of it is open; a create is left to its server."""
    from nefos.db.models import InstanceAction, InstanceActionEvent, utcnow
    from nefos.objects import actions

    idle = await make_instance(db, vm_state=states.ACTIVE, task_state=None)
    busy = await make_instance(db, vm_state=states.ACTIVE, task_state=states.REBOOTING)

    async def action(instance: str, name: str, *events: tuple) -> int:
        async with db.transaction() as s:
            row = InstanceAction(action=name, instance_uuid=instance, request_id=f"req-{uuid.uuid4()}",
                                 start_time=utcnow())
            s.add(row)
            await s.flush()
            for host, finished in events:
                s.add(InstanceActionEvent(action_id=row.id, event="step", start_time=utcnow(), host=host,
                                          finish_time=utcnow() if finished else None,
                                          result="Success" if finished else None))
            return row.id

    over = await action(idle, "reboot", ("h1", True), ("h1", False))
    resumed = await action(busy, "reboot", ("h1", False))
    other_open = await action(idle, "stop", ("h1", False), (None, False))
    elsewhere = await action(idle, "pause", ("h2", False))
    create = await action(idle, "create", ("h1", False))
    assert await actions.end_interrupted_steps(db, "h1", "killed") == 4
    async with db.reader() as s:
        finished = {r.id: (r.finish_time is not None, r.message)
                    for r in (await s.execute(select(InstanceAction))).scalars()}
        steps = {}
        for e in (await s.execute(select(InstanceActionEvent).order_by(InstanceActionEvent.id))).scalars():
            steps.setdefault(e.action_id, []).append((e.host, e.finish_time is not None, e.result, e.details))
    assert finished[over] == (True, "Error")
    assert steps[over] == [("h1", True, "Success", None), ("h1", True, "Error", "killed")]
    assert finished[resumed] == finished[other_open] == finished[elsewhere] == finished[create] == (False, None)
    assert steps[resumed] == steps[create] == [("h1", True, "Error", "killed")]
    assert steps[other_open] == [("h1", True, "Error", "killed"), (None, False, None, None)]
    assert steps[elsewhere] == [("h2", False, None, None)]
    assert await actions.end_interrupted_steps(db, "h1", "killed") == 0


@pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres),
                                    pytest.param("mysql", marks=pytest.mark.mysql)], indirect=True)
async def test_a_host_step_the_database_chose_as_a_deadlock_victim_runs_again(db, monkeypatch):
    """The conductor's steps of moves write in one transaction; several evacuations off one host
    release claims on its node together and MariaDB may pick one as a deadlock's victim. The step
    runs again (the evacuation does not fail with "the database is too busy"), and once."""
    from types import SimpleNamespace

    from nefos.control.conductor.migration_surface import MigrationSurface
    from nefos.db.retry import is_contention
    from nefos.objects import migrations as migrations_obj

    async def once(txn):
        await txn()
    results, _used = await _deadlocking_pair(db, once)
    (deadlock,) = [r for r in results if isinstance(r, Exception)]
    assert is_contention(deadlock)  # a real one, as the driver raises it

    uid = await make_instance(db, vm_state=states.ACTIVE, task_state=states.REBUILDING, host="h1")
    set_status, statuses = migrations_obj.set_status, []

    async def victim_once(db_, uuid_, status, *, session=None):
        statuses.append(status)
        if len(statuses) == 1:
            raise deadlock
        await set_status(db_, uuid_, status, session=session)
    monkeypatch.setattr(migrations_obj, "set_status", victim_once)
    surface = MigrationSurface()
    surface.rt = SimpleNamespace(db=db)
    instance = await surface.evacuation_done(None, uid, {"host": "h2", "task_state": None}, str(uuid.uuid4()),
                                             expected_task_state=[states.REBUILDING])
    assert (instance["host"], instance["task_state"], statuses) == ("h2", None, ["done", "done"])
