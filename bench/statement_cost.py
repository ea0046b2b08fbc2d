"""Client CPU of one database statement, by path: what a statement costs the process that sends it.

The same read by primary key (a ``services`` row) and the same single-row UPDATE, N times each, through:

* ``sqlite``: Nefos's Database on SQLite (sessions run inline on the event loop);
* ``pg-session``: Nefos's Database on PostgreSQL (SQLAlchemy's AsyncSession on asyncpg), one
  reader or autocommit session per statement, as the services open them;
* ``pg-session-reused``: the same, every statement in one open session;
* ``pg-connection``: SQLAlchemy's AsyncConnection (Core, no ORM session) on the same engine;
* ``pg-asyncpg``: asyncpg alone, the statement text prepared once.

CPU is this process's (user + system) per statement, with the machine's reference timeit. The
PostgreSQL server is one of the bench's own (tests/database_servers.py), or NEFOS_BENCH_PG_ADMIN_URL.

  python bench/statement_cost.py --statements 3000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select, text, update  # noqa: E402

from nefos.db.migrate import upgrade  # noqa: E402
from nefos.db.models import Service, utcnow  # noqa: E402
from nefos.db.session import Database  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from boot import reference_timeit  # noqa: E402  (the same reference as the boot bench's)


async def _seed(db: Database) -> int:
    async with db.transaction() as s:
        row = Service(uuid=str(uuid.uuid4()), host=f"bench-{uuid.uuid4().hex[:6]}", binary="nefos-compute",
                      topic="compute", report_count=0, disabled=False, created_at=utcnow(), updated_at=utcnow())
        s.add(row)
        await s.flush()
        return row.id


def _read(service_id: int):
    return select(Service.id, Service.host, Service.report_count).where(Service.id == service_id)


def _write(service_id: int, n: int):
    return update(Service).where(Service.id == service_id).values(report_count=n)


async def _timed(n: int, one) -> float:
    """Microseconds of this process's CPU per ``await one(i)``."""
    for i in range(min(200, n)):  # warm: statement caches, prepared statements, pool
        await one(i)
    started = time.process_time()
    for i in range(n):
        await one(i)
    return round((time.process_time() - started) / n * 1e6, 1)


async def _database_paths(db: Database, n: int, prefix: str) -> dict:
    service_id = await _seed(db)
    out = {}

    async def read_in_session(_i):
        async with db.reader() as s:
            (await s.execute(_read(service_id))).one()

    async def write_in_session(i):
        async with db.autocommit() as s:
            await s.execute(_write(service_id, i))

    out[f"{prefix}: read, a session each"] = await _timed(n, read_in_session)
    out[f"{prefix}: write, a session each"] = await _timed(n, write_in_session)
    async with db.reader() as s:
        async def read_reused(_i):
            (await s.execute(_read(service_id))).one()
        out[f"{prefix}-reused: read"] = await _timed(n, read_reused)
    return out, service_id


async def run(n: int) -> dict:
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.uname().nodename} "
                     f"{os.cpu_count()} cores {os.uname().machine}", "load_before": os.getloadavg()[0],
                     "reference_timeit_ms": reference_timeit(), "statements": n, "us_cpu_per_statement": {}}
    per = results["us_cpu_per_statement"]
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{tmp}/bench.sqlite")
        await upgrade(db)
        got, _ = await _database_paths(db, n, "sqlite")
        per.update(got)
        await db.dispose()

    own = None
    admin = os.environ.get("NEFOS_BENCH_PG_ADMIN_URL")
    if admin is None:
        from tests.database_servers import OwnPostgres
        own = OwnPostgres(max_connections=20)
        own.start()
        admin = own.url("postgres")
    name = f"nefos_stmt_{uuid.uuid4().hex[:8]}"
    import asyncpg
    plain = admin.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(plain)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    url = plain.rsplit("/", 1)[0] + f"/{name}"
    try:
        db = Database(url, max_pool_size=2, max_overflow=0)
        await upgrade(db)
        got, service_id = await _database_paths(db, n, "pg-session")
        per.update(got)
        async with db.engine.connect() as c:
            async def read_connection(_i):
                (await c.execute(_read(service_id))).one()
            per["pg-connection: read"] = await _timed(n, read_connection)
            await c.execute(text("SELECT 1"))
        await db.dispose()
        raw = await asyncpg.connect(url)
        statement = await raw.prepare("SELECT id, host, report_count FROM services WHERE id = $1")

        async def read_asyncpg(_i):
            await statement.fetchrow(service_id)

        async def write_asyncpg(i):
            await raw.execute("UPDATE services SET report_count = $1 WHERE id = $2", i, service_id)
        per["pg-asyncpg: read"] = await _timed(n, read_asyncpg)
        per["pg-asyncpg: write"] = await _timed(n, write_asyncpg)
        await raw.close()
        conn = await asyncpg.connect(plain)
        await conn.execute(f'DROP DATABASE "{name}"')
        await conn.close()
    finally:
        if own is not None:
            own.destroy()
    results["load_after"] = os.getloadavg()[0]
    results["reference_timeit_ms_after"] = reference_timeit()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=3000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.statements)), indent=2))


if __name__ == "__main__":
    main()
