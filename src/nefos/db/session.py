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
from typing import AsyncIterator

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


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


class Database:
    def __init__(self, url: str, echo: bool = False, *, max_pool_size: int = 20, max_overflow: int = 40):
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict = {"echo": echo}
        if self.is_sqlite:
            from sqlalchemy.engine import make_url

            from nefos.db import sqlite_inline
            path = make_url(self.url).database or ":memory:"
            kwargs["async_creator"] = sqlite_inline.creator(path, timeout=60)
        else:
            # Per process: a multi-host cloud runs many processes against one server, whose
            # connection limit (PostgreSQL's default is 100) they all share.
            kwargs.update(pool_size=max_pool_size, max_overflow=max_overflow, pool_pre_ping=True,
                          pool_recycle=3600)
        if self.url.startswith("mysql"):
            # READ COMMITTED, as on PostgreSQL: each statement sees what is committed, so code
            # tested on one server behaves the same on the other (and InnoDB takes no gap locks).
            # SQLAlchemy's MySQL dialects already ask for FOUND_ROWS, so an UPDATE that matches a
            # row without changing it still counts in ``rowcount`` (the CAS saves rely on it).
            kwargs["isolation_level"] = "READ COMMITTED"
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.is_sqlite:
            @event.listens_for(self.engine.sync_engine, "connect")
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

            @event.listens_for(self.engine.sync_engine, "begin")
            def _sqlite_begin(conn):
                if not conn.get_execution_options().get("nefos_autocommit"):
                    conn.exec_driver_sql("BEGIN")
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        # Plain reads run each statement on its own (one round trip less per read on SQLite).
        self._autocommit_sessions = async_sessionmaker(
            self.engine.execution_options(nefos_autocommit=True), expire_on_commit=False)
        self._write_lock = asyncio.Lock() if self.is_sqlite else None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction: committed on success, rolled back on error."""
        if self._write_lock is not None:
            async with self._write_lock:
                async with self._sessions() as session, session.begin():
                    yield session
        else:
            async with self._sessions() as session, session.begin():
                yield session

    @contextlib.asynccontextmanager
    async def reader(self, *, snapshot: bool = False) -> AsyncIterator[AsyncSession]:
        """A session for reads only, never holding the SQLite write lock.

        Each statement sees what is committed when it runs; with ``snapshot`` all
        statements of the session see one snapshot (a read transaction).
        """
        sessions = self._sessions if snapshot or not self.is_sqlite else self._autocommit_sessions
        async with sessions() as session:
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()
