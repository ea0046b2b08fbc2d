"""aiosqlite's connection interface, run on the event loop's own thread.

aiosqlite hands every call to a worker thread and back; for SQLite's
sub-millisecond statements that hand-off costs more than the statement (it
nearly halved the all-in-one's boot rate). Nefos runs SQLite in one process
whose writers already queue on an asyncio lock (``Database.transaction``),
so a call never waits on another writer and can simply run inline. This
subclass keeps aiosqlite's interface (which SQLAlchemy's aiosqlite dialect
drives) and replaces only its thread hand-off. Multi-process deployments use
PostgreSQL or MySQL instead.
"""

from __future__ import annotations

import sqlite3
from functools import partial

import aiosqlite


class _RunNow:
    """Stands in for aiosqlite's queue to its worker thread: runs each call at once.

    (SQLAlchemy's adapter also puts calls on that queue directly, e.g. to set the
    isolation level.)
    """

    def put_nowait(self, item) -> None:
        future, function = item
        try:
            result = function()
        except BaseException as exc:  # handed to the awaiting caller, as aiosqlite does
            if future is not None and not future.done():
                future.set_exception(exc)
            return
        if future is not None and not future.done():
            future.set_result(result)


class InlineConnection(aiosqlite.Connection):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tx = _RunNow()

    def __await__(self):
        return self._connect().__await__()  # no worker thread to start

    async def _connect(self) -> "InlineConnection":
        if self._connection is None:
            self._connection = self._connector()
        return self

    async def _execute(self, fn, *args, **kwargs):
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    def stop(self):
        self._running = False
        return None

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._running = False


def creator(path: str, **kwargs):
    """An ``async_creator`` for SQLAlchemy's sqlite+aiosqlite engine."""
    async def connect() -> InlineConnection:
        return await InlineConnection(partial(sqlite3.connect, path, **kwargs), iter_chunk_size=64)
    return connect
