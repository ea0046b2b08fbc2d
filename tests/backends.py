"""Fresh databases on the server backends for tests (PostgreSQL, MySQL/MariaDB).

Servers come from ``NEFOS_TEST_PG_URL`` / ``NEFOS_TEST_MYSQL_URL`` (admin URLs,
defaults: postgres@ / root@ on 127.0.0.1); ``scripts/run-tests.sh`` starts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_ADMIN_URL = os.environ.get("NEFOS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN_URL = os.environ.get("NEFOS_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres),
            pytest.param("mysql", marks=pytest.mark.mysql)]


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _pg_admin(sql: str) -> None:
    import asyncpg
    conn = await asyncpg.connect(PG_ADMIN_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _mysql_admin(sql: str) -> None:
    import aiomysql
    parts = urlsplit(MYSQL_ADMIN_URL)
    conn = await aiomysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                                  user=parts.username or "root", password=parts.password or "")
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
    finally:
        conn.close()



@contextlib.contextmanager
def fresh_database(backend: str):
    """A new, empty database on ``backend`` ("postgresql" or "mysql"), dropped afterwards."""
    name = f"nefos_test_{uuid.uuid4().hex[:12]}"
    if backend == "postgresql":
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
        try:
            yield _with_database(PG_ADMIN_URL, name)
        finally:
            asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    elif backend == "mysql":
        asyncio.run(_mysql_admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
        try:
            yield _with_database(MYSQL_ADMIN_URL, name)
        finally:
            asyncio.run(_mysql_admin(f"DROP DATABASE IF EXISTS `{name}`"))
    else:
        raise ValueError(backend)


@contextlib.asynccontextmanager
async def migrated(url: str):
    """A ``Database`` on ``url`` with the schema at head (the first user migrates; later ones find
    it there), disposed afterwards."""
    from nefos.db.migrate import upgrade
    from nefos.db.session import Database
    database = Database(url)
    await upgrade(database)
    try:
        yield database
    finally:
        await database.dispose()
