"""SQLite sessions run on the event loop's own thread, without the asyncio bridge.

SQLite's statements take a few microseconds, and in one Nefos process its
writers already queue on an asyncio lock (``Database.transaction``), so a
call never waits on another writer and can simply run inline. SQLAlchemy's
asyncio layer (a greenlet switch and an adapted driver per call) costs ten
times the statement itself: measured on the project's 2-core machine, a
prebuilt SELECT took 74 us through ``AsyncSession`` and 36 us through a plain
``Session``; an empty write transaction 80 us and 27 us. So for SQLite
``Database`` hands out ``InlineSession``: the awaitable interface of
``AsyncSession`` that Nefos uses, over a synchronous ``Session`` of a
synchronous engine on the same file. PostgreSQL and MySQL keep the real
asyncio drivers (their calls do wait on the network).
"""

from __future__ import annotations

import contextlib
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

# What AsyncSession asks for on every statement: rows are fetched before the call returns,
# so a result outlives its cursor (callers read results after the session closed).
_BUFFERED = {"prebuffer_rows": True}


class InlineSession:
    """``AsyncSession``'s methods that Nefos calls, each running the synchronous call at once."""

    __slots__ = ("sync_session",)

    def __init__(self, sync_session: Session):
        self.sync_session = sync_session

    @property
    def info(self) -> dict:
        return self.sync_session.info

    @property
    def bind(self) -> Engine:
        return self.sync_session.get_bind()

    async def execute(self, statement, params=None, *, execution_options=None, **kw):
        options = _BUFFERED if not execution_options else {**execution_options, **_BUFFERED}
        return self.sync_session.execute(statement, params, execution_options=options, **kw)

    async def get(self, entity, ident, **kw):
        return self.sync_session.get(entity, ident, **kw)

    def add(self, instance) -> None:
        self.sync_session.add(instance)

    def add_all(self, instances) -> None:
        self.sync_session.add_all(instances)

    async def flush(self, objects=None) -> None:
        self.sync_session.flush(objects)

    async def delete(self, instance) -> None:
        self.sync_session.delete(instance)

    async def refresh(self, instance, attribute_names=None) -> None:
        self.sync_session.refresh(instance, attribute_names)

    @contextlib.asynccontextmanager
    async def begin(self):
        """The session's transaction: committed when the block ends, rolled back when it fails."""
        with self.sync_session.begin():
            yield self

    @contextlib.asynccontextmanager
    async def begin_nested(self):
        """A SAVEPOINT: rolled back (and the error raised) when the block fails."""
        with self.sync_session.begin_nested():
            yield self


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
            conn.exec_driver_sql("BEGIN")
