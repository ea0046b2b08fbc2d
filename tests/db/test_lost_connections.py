"""A lost database connection is retried, or answered 503: never a 500.

Each server backend runs a server of this module's own (tests/database_servers.py), which the
tests stop, start and restart as a database restart would. A transaction waits (``retrying`` and
the Database's connection checkout) up to ``DISCONNECT_TIMEOUT`` for the server to come back;
the tests that need it back set a generous timeout (the machine may be slow to start a server),
those that need it to stay away a short one. Nothing waits on a clock to order events: a test
waits for the retry to say it is waiting for the database (its log line) before the server
comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from nefos import exceptions, rest
from nefos.cmd.allinone import free_port
from nefos.control.compute.rest.app import create_app, nova_error_body
from nefos.bus.base import Endpoint
from nefos.bus.local import LocalBus
from nefos.bus.versioning import RPCInterface
from nefos.config import load_config
from nefos.context import admin_context
from nefos.db import retry
from nefos.db.retry import is_contention, is_disconnect, retrying, transient_error
from nefos.db.session import Database
from nefos.service import Runtime
from tests.database_servers import OwnMariaDB, OwnPostgres
from tests.noauth import ADMIN

SERVERS = [pytest.param("postgresql", marks=pytest.mark.postgres), pytest.param("mysql", marks=pytest.mark.mysql)]
MARKS = "lost_connection_marks"
UNAVAILABLE = {"serviceUnavailable": {"code": 503, "message": exceptions.DatabaseUnavailable.message}}


@pytest.fixture(scope="module", params=SERVERS)
def server(request):
    own = OwnPostgres() if request.param == "postgresql" else OwnMariaDB()
    try:
        own.start()
        own.database_url = own.create_database("nefos")
        asyncio.run(_statements(own.database_url, f"CREATE TABLE {MARKS} (name VARCHAR(64) PRIMARY KEY)",
                                "CREATE TABLE lost_connection_locks (id INTEGER PRIMARY KEY, n INTEGER)",
                                "INSERT INTO lost_connection_locks VALUES (1, 0), (2, 0)"))
        yield own
    finally:
        own.destroy()


@pytest.fixture
def up(server):
    """The server, running, for a test that may leave it stopped."""
    if not server.running:
        server.start()
    yield server
    if not server.running:
        server.start()


@pytest.fixture
async def db(up):
    database = Database(up.database_url)
    await _statements(up.database_url, f"DELETE FROM {MARKS}")
    yield database
    await database.dispose()


@pytest.fixture
def back_in_time(monkeypatch):
    """A timeout the server surely comes back within, even on a loaded machine."""
    monkeypatch.setattr(retry, "DISCONNECT_TIMEOUT", 120.0)


@pytest.fixture
def stays_down(monkeypatch):
    """A short timeout: the server will not come back, and the test need not wait long for that."""
    monkeypatch.setattr(retry, "DISCONNECT_TIMEOUT", 0.5)


class RetryWaits(logging.Handler):
    """Counts the waits ``retrying`` logs before each new attempt."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0
        self.changed = asyncio.Event()

    def emit(self, record) -> None:
        self.count += 1
        self.changed.set()

    async def until_waiting(self, task: asyncio.Task) -> None:
        """Return once ``task`` waits for the database; fail if it finishes without waiting."""
        while self.count == 0:
            self.changed.clear()
            changed = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait({task, changed}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            if task.done():
                pytest.fail(f"finished without waiting for the database: {task.result()!r}")


@pytest.fixture
def retry_waits():
    logger = logging.getLogger(retry.__name__)
    handler, level = RetryWaits(), logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def _statements(url: str, *statements: str) -> None:
    database = Database(url)
    try:
        async with database.transaction() as s:
            for statement in statements:
                await s.execute(text(statement))
    finally:
        await database.dispose()


async def _add_mark(s, name: str) -> None:
    await s.execute(text(f"INSERT INTO {MARKS} (name) VALUES (:name)"), {"name": name})


async def _marks(db: Database) -> list[str]:
    async with db.reader() as s:
        return sorted((await s.execute(text(f"SELECT name FROM {MARKS}"))).scalars())


# retrying() --------------------------------------------------------------------------------

async def test_a_transaction_started_while_the_server_is_down_runs_once_it_is_back(
        db, up, retry_waits, back_in_time):
    await _marks(db)  # the pool keeps a connection, which the stop kills
    await asyncio.to_thread(up.stop)

    async def write() -> None:
        async for attempt in retrying():
            with attempt:
                async with db.transaction() as s:
                    await _add_mark(s, "started-while-down")

    task = asyncio.create_task(write())
    await retry_waits.until_waiting(task)
    await asyncio.to_thread(up.start)
    await task
    assert await _marks(db) == ["started-while-down"]


async def test_a_transaction_that_loses_its_connection_runs_again_whole(db, up, retry_waits, back_in_time):
    attempts = 0

    async def write() -> None:
        nonlocal attempts
        async for attempt in retrying():
            with attempt:
                async with db.transaction() as s:
                    attempts += 1
                    await _add_mark(s, f"attempt-{attempts}")
                    if attempts == 1:
                        await asyncio.to_thread(up.stop)  # the server goes away mid-transaction
                    await s.execute(text("SELECT 1"))

    task = asyncio.create_task(write())
    await retry_waits.until_waiting(task)
    await asyncio.to_thread(up.start)
    await task
    # The first attempt's row went with its connection; the one that committed is a later one's.
    assert await _marks(db) == [f"attempt-{attempts}"] and attempts > 1


# Through the REST API and the bus -------------------------------------------------------------

@contextlib.asynccontextmanager
async def _compute_api(server, tmp_path):
    cfg = load_config(state_dir=tmp_path, database_url=server.database_url, auth_strategy="noauth")
    runtime = await Runtime.open(cfg, migrate=True)
    try:
        from nefos.control.compute.flavors import ensure_default_flavors
        await ensure_default_flavors(runtime.db)
        # The transport raises what the app lets out after answering: a 503 must be an answer
        # of the app's own, not a crash that the server turned into a response.
        transport = httpx.ASGITransport(app=create_app(runtime, compute_api=None))
        async with httpx.AsyncClient(transport=transport, base_url="http://nefos", headers=ADMIN) as client:
            yield client
    finally:
        await runtime.close()


async def test_requests_across_database_restarts_succeed(up, tmp_path, retry_waits, back_in_time):
    async with _compute_api(up, tmp_path) as client:
        assert (await client.get("/v2.1/flavors/detail")).status_code == 200
        await asyncio.to_thread(up.restart)  # between two requests
        assert (await client.get("/v2.1/flavors/detail")).status_code == 200

        await asyncio.to_thread(up.stop)  # a request arrives while the server is away
        request = asyncio.create_task(client.get("/v2.1/flavors/detail"))
        await retry_waits.until_waiting(request)
        await asyncio.to_thread(up.start)
        response = await request
        assert response.status_code == 200, response.text
        assert response.json()["flavors"]


async def test_a_database_that_stays_down_is_a_503_in_the_apis_error_body(up, tmp_path, stays_down):
    async with _compute_api(up, tmp_path) as client:
        assert (await client.get("/v2.1/flavors/detail")).status_code == 200
        await asyncio.to_thread(up.stop)
        for path in ("/v2.1/flavors/detail", "/v2.1/flavors/1", "/v2.1/os-keypairs"):
            response = await client.get(path)
            assert (response.status_code, response.json()) == (503, UNAVAILABLE), path


async def test_a_connection_lost_at_commit_is_a_503(db, up):
    """Outside ``retrying`` nothing runs the transaction again: the caller hears 503, not 500."""
    app = rest.make_app("lost at commit", "test", nova_error_body)

    @app.get("/")  # a public path: no token needed
    async def add_mark():
        async with db.transaction() as s:
            await _add_mark(s, "lost-at-commit")
            await asyncio.to_thread(up.stop)
        return {"never": "reached"}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://nefos") as client:
        response = await client.get("/")
    assert (response.status_code, response.json()) == (503, UNAVAILABLE)


class _ReadsTheDatabase(Endpoint):
    rpc_interface = RPCInterface("marks", version="1.0", methods={"count_marks": "1.0"})

    def __init__(self, db: Database):
        self.db = db

    async def count_marks(self, ctx) -> int:
        return len(await _marks(self.db))


async def test_an_rpc_answered_by_a_service_without_its_database_raises_database_unavailable(
        db, up, stays_down):
    bus = LocalBus()
    await bus.start()
    try:
        await bus.serve("marks", _ReadsTheDatabase(db))
        assert await bus.call(admin_context(), "marks", "count_marks", version="1.0") == 0
        await asyncio.to_thread(up.stop)
        with pytest.raises(exceptions.DatabaseUnavailable) as raised:
            await bus.call(admin_context(), "marks", "count_marks", version="1.0")
        assert raised.value.code == 503
    finally:
        await bus.stop()


# is_disconnect / transient_error on what the drivers raise ----------------------------------

async def _raised(coro) -> BaseException:
    try:
        await coro
    except Exception as exc:
        return exc
    raise AssertionError("nothing raised")


async def _kill_own_connection(db: Database, dialect: str) -> None:
    """The server ends this session's connection (an administrator, a failover), then it is used."""
    async with db.transaction() as s:
        if dialect == "postgresql":
            await s.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        else:
            await s.execute(text("KILL CONNECTION CONNECTION_ID()"))
        await s.execute(text("SELECT 1"))


async def _deadlock(db: Database) -> BaseException:
    """Two transactions each holding the row the other one wants: the server rolls one back."""
    holding = [asyncio.Event(), asyncio.Event()]

    async def lock(first: int, second: int, mine: asyncio.Event, theirs: asyncio.Event) -> None:
        async with db.transaction() as s:
            await s.execute(text("UPDATE lost_connection_locks SET n = n + 1 WHERE id = :id"), {"id": first})
            mine.set()
            await theirs.wait()
            await s.execute(text("UPDATE lost_connection_locks SET n = n + 1 WHERE id = :id"), {"id": second})

    results = await asyncio.gather(lock(1, 2, holding[0], holding[1]), lock(2, 1, holding[1], holding[0]),
                                   return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1, results
    return errors[0]


async def test_what_the_drivers_raise_is_told_apart(db, up, stays_down):
    dialect = db.engine.dialect.name
    async with db.transaction() as s:
        await _add_mark(s, "taken")

    duplicate = await _raised(_statements(up.database_url, f"INSERT INTO {MARKS} VALUES ('taken')"))
    assert isinstance(duplicate, IntegrityError)
    syntax = await _raised(_statements(up.database_url, "SELEKT 1"))
    with socket.socket() as sock:  # a refused connection that is no database's
        not_a_database = await _raised(asyncio.to_thread(sock.connect, ("127.0.0.1", free_port())))
    assert isinstance(not_a_database, ConnectionRefusedError)
    deadlock = await _deadlock(db)
    killed = await _raised(_kill_own_connection(db, dialect))

    await asyncio.to_thread(up.stop)
    refused = await _raised(_marks(db))
    lost_database = Database(up.database_url)
    try:
        never_connected = await _raised(_marks(lost_database))
    finally:
        await lost_database.dispose()

    for exc in (killed, refused, never_connected):
        assert is_disconnect(exc) and not is_contention(exc), repr(exc)
        assert isinstance(transient_error(exc), exceptions.DatabaseUnavailable), repr(exc)
    assert is_contention(deadlock) and not is_disconnect(deadlock), repr(deadlock)
    assert isinstance(transient_error(deadlock), exceptions.DatabaseBusy)
    for exc in (duplicate, syntax, not_a_database):
        assert not is_disconnect(exc) and not is_contention(exc) and transient_error(exc) is None, repr(exc)
    assert transient_error(exceptions.InstanceNotFound(instance_id=str(uuid.uuid4()))) is None


async def test_an_exhausted_pool_is_a_busy_database_not_an_unexpected_error(tmp_path):
    """A process whose every pooled connection stays busy past pool_timeout answers 503 (the
    database busy), as for contention: pools are sized to the deployment's connection budget with
    no overflow, so a burst may wait out the pool."""
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}", poolclass=sqlalchemy.pool.AsyncAdaptedQueuePool,
                                 pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        async with engine.connect():
            with pytest.raises(sqlalchemy.exc.TimeoutError) as raised:
                async with engine.connect():
                    pass
        assert isinstance(transient_error(raised.value), exceptions.DatabaseBusy)
        assert transient_error(raised.value).code == 503
    finally:
        await engine.dispose()
