"""The async engine and the one way to open a transaction.

SQLite allows one writer at a time; inside one process we serialise write
transactions on an asyncio lock instead of letting them collide on
``database is locked`` (WAL still lets readers run beside the writer).
PostgreSQL and MySQL need no such lock: every cross-request invariant
(claims, quotas, IPs, task_state) is kept by conditional UPDATEs and unique
keys, which are atomic on every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import AsyncIterator, Callable

from sqlalchemy import create_engine, event as sa_event, insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from nefos import metrics
from nefos.db import retry, sqlite_inline


def normalise_url(url: str) -> str:
    """Accept the plain URLs operators write and pick the async driver."""
    for plain, asyncdriver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("mysql://", "mysql+aiomysql://"),
        ("mariadb://", "mysql+aiomysql://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            url = asyncdriver + url[len(plain):]
            break
    if url.startswith("mysql+") and "charset=" not in url:
        # Full Unicode (4-byte UTF-8) on the connection, whatever the server's default.
        url += ("&" if "?" in url else "?") + "charset=utf8mb4"
    return url

# Reader connections a SQLite Database keeps between sessions (more are opened while more
# readers run at once, and closed when they end).
_MAX_IDLE_READERS = 32


def given_or(session, opener):
    """``session`` when the caller passes one (several statements of one call sharing a
    connection), else a session of ``opener()``'s (e.g. ``db.autocommit``, ``db.reader``)."""
    return contextlib.nullcontext(session) if session is not None else opener()


def after_commit(session, callback: Callable[[], None]) -> None:
    """Call ``callback()`` once the transaction of ``session`` (from ``Database.transaction``) commits."""
    if isinstance(session, sqlite_inline.InlineSession):
        session.after_commit.append(callback)
    else:
        sa_event.listen(session.sync_session, "after_commit", lambda _session: callback(), once=True)


async def _checked_out(make: Callable[[], AsyncSession]) -> AsyncSession:
    """A new session of ``make`` that has checked out its connection (closed again on failure)."""
    session = make()
    try:
        await session.connection()
    except BaseException:
        await session.close()
        raise
    return session


class Database:
    def __init__(self, url: str, echo: bool = False, *, max_pool_size: int = 20, max_overflow: int = 40):
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict = {"echo": echo}
        self.is_postgresql = self.url.startswith("postgresql")
        if not self.is_sqlite:
            # Per process: a multi-host cloud runs many processes against one server, whose
            # connection limit (PostgreSQL's default is 100) they all share
            # (nefos.db.connection_budget). PostgreSQL: no pre-ping round trips (see
            # _drop_closed_connection); MySQL keeps SQLAlchemy's pre-ping.
            kwargs.update(pool_size=max_pool_size, max_overflow=max_overflow,
                          pool_pre_ping=not self.is_postgresql, pool_recycle=3600)
        if self.url.startswith("mysql"):
            # READ COMMITTED, as on PostgreSQL: each statement sees what is committed, so code
            # tested on one server behaves the same on the other (and InnoDB takes no gap locks).
            # SQLAlchemy's MySQL dialects already ask for FOUND_ROWS, so an UPDATE that matches a
            # row without changing it still counts in ``rowcount`` (the CAS saves rely on it).
            kwargs["isolation_level"] = "READ COMMITTED"
        # The asyncio engine: every session on PostgreSQL/MySQL; migrations and ad-hoc
        # connections on SQLite.
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.is_sqlite:
            sqlite_inline.set_up_engine(self.engine.sync_engine)
            # Sessions run inline on the event loop (db/sqlite_inline.py), on connections this
            # Database holds: one for the writer (writers queue on the lock below) and idle
            # ones for readers, each reader holding one for its session. A pool that never
            # blocks: a wait for a free connection would stop the whole loop.
            self.sync_engine = create_engine(
                make_url(self.url).set(drivername="sqlite+pysqlite"), echo=echo,
                pool_size=max_pool_size, max_overflow=-1,
                connect_args={"timeout": 60, "check_same_thread": False})
            sqlite_inline.set_up_engine(self.sync_engine)
            self._autocommit_engine = self.sync_engine.execution_options(nefos_autocommit=True)
            self._writer_conn = None
            self._idle_readers: list = []
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = self._sessions
        # A snapshot reader's statements all see one snapshot: under READ COMMITTED (the servers'
        # level here) each statement of a transaction takes a new one.
        self._snapshot_sessions = None if self.is_sqlite else async_sessionmaker(
            self.engine.execution_options(isolation_level="REPEATABLE READ"), expire_on_commit=False)
        if self.is_postgresql:
            sa_event.listen(self.engine.sync_engine.pool, "checkout", _drop_closed_connection)
            # Plain reads run outside a transaction (each statement sees what is committed when
            # it runs, as reader() promises anyway): no BEGIN and ROLLBACK round trips around them.
            self._read_sessions = async_sessionmaker(
                self.engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)
        self._write_lock = asyncio.Lock() if self.is_sqlite else None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction: committed on success, rolled back on error."""
        if self.is_sqlite:
            async with self._write_lock:
                if self._writer_conn is None or self._writer_conn.closed:
                    self._writer_conn = self.sync_engine.connect()
                session = sqlite_inline.InlineSession(self._writer_conn)
                opened = time.monotonic()
                try:
                    async with session.begin():
                        yield session
                finally:
                    session.close()
                    metrics.DB_TRANSACTION_TIME.observe(time.monotonic() - opened)
        else:
            session = await self._connected_session()
            opened = time.monotonic()
            try:
                async with session:  # closed at the end, its connection back in the pool
                    try:
                        yield session
                    except BaseException:
                        await session.rollback()
                        raise
                    await session.commit()
            finally:
                metrics.DB_TRANSACTION_TIME.observe(time.monotonic() - opened)

    @contextlib.asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncSession]:
        """A session for writes that need no transaction around them: one statement (atomic by
        itself, such as a compare-and-swap UPDATE ... RETURNING), or statements each of which may
        commit alone. On PostgreSQL each statement commits as it runs: no BEGIN and COMMIT round
        trips. Elsewhere it is ``transaction()``."""
        if not self.is_postgresql:
            async with self.transaction() as session:
                yield session
            return
        async with await self._connected_session(self._read_sessions) as session:
            yield session

    async def _connected_session(self, sessions=None) -> AsyncSession:
        """A new session that has checked out its connection, in its transaction.

        No statement has run yet, so a connection refused (the server is down, restarting or
        still starting) or found lost (the pool pre-pings each one it hands out) is safe to try
        again: wait for the database, up to ``DISCONNECT_TIMEOUT``, rather than fail a request
        that arrived during a restart."""
        make = sessions or self._sessions
        started = time.monotonic()
        try:
            # The usual case without the retry machinery (tenacity's costs tens of microseconds,
            # and every reader and transaction of every service comes here).
            return await _checked_out(make)
        except Exception as exc:
            if not (retry.is_contention(exc) or retry.is_disconnect(exc)):
                raise
        async for attempt in retry.retrying(attempts=max(1, retry.ATTEMPTS - 1), disconnect_timeout=max(
                0.0, retry.DISCONNECT_TIMEOUT - (time.monotonic() - started))):
            with attempt:
                session = await _checked_out(make)
        return session

    @contextlib.asynccontextmanager
    async def reader(self, *, snapshot: bool = False) -> AsyncIterator[AsyncSession]:
        """A session for reads only, never holding the SQLite write lock.

        Each statement sees what is committed when it runs; with ``snapshot`` all
        statements of the session see one snapshot (a read transaction).
        """
        if not self.is_sqlite:
            async with await self._connected_session(self._snapshot_sessions if snapshot else self._read_sessions) \
                    as session:
                yield session
            return
        if snapshot:
            with self.sync_engine.connect() as conn:
                session = sqlite_inline.InlineSession(conn)
                try:
                    with conn.begin():
                        yield session
                finally:
                    session.close()
            return
        conn = self._idle_readers.pop() if self._idle_readers else self._autocommit_engine.connect()
        session = sqlite_inline.InlineSession(conn)
        try:
            yield session
        except BaseException:
            conn.rollback()
            raise
        finally:
            session.close()
            if len(self._idle_readers) < _MAX_IDLE_READERS:
                self._idle_readers.append(conn)
            else:
                conn.close()

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.is_sqlite:
            for conn in [self._writer_conn, *self._idle_readers]:
                if conn is not None:
                    conn.close()
            self._writer_conn, self._idle_readers = None, []
            self.sync_engine.dispose()


def _drop_closed_connection(dbapi_connection, _record, _proxy) -> None:
    """Pool checkout on PostgreSQL: a connection the server closed (restart, terminated backend)
    is replaced before anyone uses it. asyncpg notices the closed socket as soon as the event loop
    reads it, so this costs no round trip, where SQLAlchemy's pre-ping on asyncpg costs three
    (BEGIN, an empty statement, ROLLBACK) for every session. A connection lost without its socket
    closing (a cut network) fails its first statement instead, as a lost connection
    (``retry.is_disconnect``: retried where the caller retries, else a 503)."""
    connection = getattr(dbapi_connection, "_connection", None)
    if connection is not None and connection.is_closed():
        raise DisconnectionError("the database closed this connection")


@contextlib.asynccontextmanager
async def savepoint(s):
    """A SAVEPOINT around Core statements: rolled back (and the error raised) when the block fails.

    On a SQLite session (``InlineSession``) straight on its connection, without the ORM session
    ``begin_nested`` would make; what that ORM session holds is flushed first, as ``begin_nested``
    does. Elsewhere the session's own ``begin_nested``."""
    if isinstance(s, sqlite_inline.InlineSession):
        await s.flush()
        with s.bind.begin_nested():
            yield s
    else:
        async with s.begin_nested():
            yield s


@functools.lru_cache(maxsize=None)
def _insert_or_nothing(dialect: str, table):
    """INSERT ... ON CONFLICT DO NOTHING where the backend has it (a duplicate key writes nothing,
    raises nothing and leaves the transaction usable), else None."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:  # MySQL's INSERT IGNORE would also hide other errors (foreign keys, truncation)
        return None
    return dialect_insert(table).on_conflict_do_nothing()


async def insert_ignoring_duplicate(s, table, values: dict) -> bool:
    """Insert one row of ``table``; False, with nothing written and the transaction intact, when
    its primary key or a unique key is already taken (the database decides, race-free)."""
    dialect = getattr(getattr(s, "bind", None), "dialect", None)
    statement = _insert_or_nothing(dialect.name, table) if dialect is not None else None
    if statement is not None:
        return (await s.execute(statement, values)).rowcount == 1
    try:
        async with savepoint(s):
            await s.execute(insert(table), values)
        return True
    except IntegrityError:
        return False
