"""What the network service's modules share: Neutron's timestamps, ids, chunking, errors, and
inserts that a duplicate key must not fail (savepoints)."""

from __future__ import annotations

import contextlib
import functools
import uuid as uuidlib

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.db.sqlite_inline import InlineSession
from nefos.network import attributes as attrs

CHUNK = 500


def iso(value) -> str | None:
    """Neutron's timestamp format: ISO 8601, seconds, UTC as ``Z``."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_id() -> str:
    return str(uuidlib.uuid4())


def chunks(values: list, size: int = CHUNK):
    for i in range(0, len(values), size):
        yield values[i:i + size]


def not_owner(action: str) -> exceptions.PolicyNotAuthorized:
    return exceptions.PolicyNotAuthorized(f"(rule:{action}) is disallowed by policy")


def bulk(items) -> list:
    if not isinstance(items, list) or not items:
        raise attrs.bad_request("Resources required")
    return items


@contextlib.asynccontextmanager
async def savepoint(s):
    """A SAVEPOINT around Core statements: rolled back (and the error raised) when the block fails.

    On a SQLite session (``InlineSession``) straight on its connection, without the ORM session
    ``begin_nested`` would make; what that ORM session holds is flushed first, as ``begin_nested``
    does. Elsewhere the session's own ``begin_nested``."""
    if isinstance(s, InlineSession):
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
