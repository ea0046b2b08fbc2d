"""SQLite sessions run on the event loop's own thread, without the asyncio bridge.

SQLite's statements take a few microseconds, and in one Nefos process its
writers already queue on an asyncio lock (``Database.transaction``), so a
call never waits on another writer and can simply run inline. SQLAlchemy's
asyncio layer (a greenlet switch and an adapted driver per call) costs ten
times the statement itself, and so do, per session, a pooled connection's
check-out and reset and an ORM ``Session``'s set-up (measured on the
project's 2-core machine: one prebuilt SELECT in its own session took 83 us
through ``Session`` over the pool and 24 us on a connection already held;
an empty write transaction 80 us through ``AsyncSession``). So for SQLite,
``Database`` hands out ``InlineSession``: the awaitable interface of
``AsyncSession`` that Nefos uses, over a connection the ``Database`` keeps
(the writer's, or an idle reader's), which runs Core statements on that
connection directly and makes an ORM ``Session`` on it only when a caller
needs one (an entity to load, add or delete). PostgreSQL and MySQL keep the
real asyncio drivers (their calls do wait on the network).
"""

from __future__ import annotations

import contextlib
from typing import Callable

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.cursor import FullyBufferedCursorFetchStrategy
from sqlalchemy.orm import Session

# What AsyncSession asks for on every statement: rows are fetched before the call returns,
# so a result outlives its cursor (callers read results after the session closed).
_BUFFERED = {"prebuffer_rows": True}


class InlineSession:
    """``AsyncSession``'s methods that Nefos calls, each running the synchronous call at once."""

    __slots__ = ("_conn", "_orm", "info", "after_commit")

    def __init__(self, conn: Connection):
        self._conn = conn
        self._orm: Session | None = None
        self.info: dict = {}
        # Called once the transaction committed (see ``nefos.db.session.after_commit``).
        self.after_commit: list[Callable[[], None]] = []

    @property
    def bind(self) -> Connection:
        return self._conn

    @property
    def sync_session(self) -> Session:
        """The ORM session on this session's connection, made on first use."""
        if self._orm is None:
            # It joins the connection's transaction: this session's ``begin`` commits it.
            self._orm = Session(bind=self._conn, expire_on_commit=False,
                                join_transaction_mode="rollback_only")
        return self._orm

    async def execute(self, statement, params=None, *, execution_options=None, **kw):
        if getattr(statement, "_propagate_attrs", None) or kw:
            # ORM-enabled (entities or mapped attributes): the ORM session loads them.
            options = _BUFFERED if not execution_options else {**execution_options, **_BUFFERED}
            return self.sync_session.execute(statement, params, execution_options=options, **kw)
        orm = self._orm
        if orm is not None and (orm.new or orm.dirty or orm.deleted):
            orm.flush()  # what the ORM session's autoflush would have done
        result = self._conn.execute(statement, params, execution_options=execution_options)
        if result.returns_rows:
            # Read every row now: a half-read cursor would keep this connection's SQLite
            # snapshot open for whoever uses the connection next.
            cursor = result.cursor
            result.cursor_strategy = FullyBufferedCursorFetchStrategy(cursor, cursor.description, cursor.fetchall())
        return result

    async def get(self, entity, ident, **kw):
        return self.sync_session.get(entity, ident, **kw)

    def add(self, instance) -> None:
        self.sync_session.add(instance)

    def add_all(self, instances) -> None:
        self.sync_session.add_all(instances)

    async def flush(self, objects=None) -> None:
        if self._orm is not None:
            self._orm.flush(objects)

    async def delete(self, instance) -> None:
        self.sync_session.delete(instance)

    async def refresh(self, instance, attribute_names=None) -> None:
        self.sync_session.refresh(instance, attribute_names)

    @contextlib.asynccontextmanager
    async def begin(self):
        """The connection's transaction: committed when the block ends, rolled back when it fails."""
        transaction = self._conn.begin()
        try:
            yield self
            if self._orm is not None:
                self._orm.flush()
        except BaseException:
            if transaction.is_active:  # the ORM session may have rolled it back already
                transaction.rollback()
            raise
        transaction.commit()
        for callback in self.after_commit:
            callback()

    @contextlib.asynccontextmanager
    async def begin_nested(self):
        """A SAVEPOINT: rolled back (and the error raised) when the block fails."""
        with self.sync_session.begin_nested():
            yield self

    def close(self) -> None:
        if self._orm is not None:
            self._orm.close()
            self._orm = None


def set_up_engine(engine: Engine) -> None:
    """WAL, foreign keys and transactions begun by SQLAlchemy, on every connection of ``engine``."""

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.close()
        # Let SQLAlchemy, not the driver, decide when transactions begin (the driver
        # would open one only at the first DML, so SAVEPOINTs and multi-SELECT reads
        # would escape it): SQLAlchemy's documented recipe for SQLite.
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn):
        if not conn.get_execution_options().get("nefos_autocommit"):
            # On the driver's connection: a statement through SQLAlchemy costs ten times BEGIN itself.
            conn.connection.dbapi_connection.execute("BEGIN")
