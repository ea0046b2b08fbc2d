"""CPU time of one scheduling decision at many hosts, in the scheduler's own process.

Fills a fresh database (SQLite by default, or the PostgreSQL / MariaDB test servers) with
``--hosts`` compute nodes and their services, then times ``select_destinations`` for
``--decisions`` one-instance requests, one after the other, each claiming on its host: process
CPU (``time.process_time``) and wall time per decision. With ``--heartbeats`` every host writes
its heartbeat each ``report_interval`` of wall time between decisions (not timed), as live
hosts do.

Run with the tree to measure first on the path (the script adds nothing to it)::

  PYTHONPATH=src:. python bench/scheduler_decisions.py --hosts 1000 --decisions 200
  PYTHONPATH=src:. python bench/scheduler_decisions.py --backend postgresql --heartbeats

Reports, as JSON: CPU ms per decision (p50, mean, p99), wall ms p50, the machine's reference
speed (``python3 -m timeit -n 20 "sum(range(10**6))"``, ms per loop) and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import statistics
import tempfile
import time
import timeit
import types
import uuid
from pathlib import Path

from sqlalchemy import insert, select

from nefos.config import Config
from nefos.db.migrate import upgrade
from nefos.db.models import ComputeNode, Service, utcnow
from nefos.db.session import Database
from nefos.control.scheduler.manager import SchedulerManager


def reference_timeit() -> float:
    """ms per ``sum(range(10**6))`` (python3 -m timeit -n 20's loop, best of 3)."""
    return round(min(timeit.repeat("sum(range(10**6))", number=20, repeat=3)) / 20 * 1000, 1)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


@contextlib.contextmanager
def database_url(backend: str):
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="nefos-sched-bench-") as tmp:
            yield f"sqlite:///{tmp}/nefos.sqlite"
        return
    from tests.backends import fresh_database
    with fresh_database(backend) as url:
        yield url


async def fill(db: Database, hosts: int) -> list[int]:
    """``hosts`` nodes and their services, created a day ago (an established cloud), alive now."""
    now = utcnow()
    created = now - dt.timedelta(days=1)
    names = [f"bench-host-{i:05d}" for i in range(hosts)]
    async with db.transaction() as s:
        await s.execute(insert(Service), [
            {"uuid": str(uuid.uuid4()), "host": name, "binary": "nova-compute", "topic": "compute",
             "last_seen_up": now, "report_count": 1, "created_at": created} for name in names])
        await s.execute(insert(ComputeNode), [
            {"uuid": str(uuid.uuid4()), "host": name, "hypervisor_hostname": f"{name}.node", "vcpus": 64,
             "memory_mb": 262144, "local_gb": 2000, "created_at": created} for name in names])
    async with db.reader() as s:
        return list((await s.execute(select(Service.id).order_by(Service.id))).scalars())


async def heartbeat_due(db: Database, service_ids: list[int], started: float, done: int,
                        interval: float) -> int:
    """Heartbeat the hosts whose turn came since ``done`` were written (each every ``interval``)."""
    from nefos.objects.service_rows import heartbeat
    due = int((time.monotonic() - started) / interval * len(service_ids))
    for i in range(done, due):
        await heartbeat(db, service_ids[i % len(service_ids)])
    return max(done, due)


async def run(args, url: str) -> dict:
    cfg = Config(database_url=url, state_dir=Path(tempfile.gettempdir()))
    db = Database(url)
    try:
        await upgrade(db)
        service_ids = await fill(db, args.hosts)
        manager = SchedulerManager(types.SimpleNamespace(db=db, cfg=cfg))
        flavor = {"vcpus": 1, "memory_mb": 512, "root_gb": 1, "ephemeral_gb": 0, "swap": 0,
                  "extra_specs": {}}
        spec = {"flavor": flavor, "project_id": "bench", "scheduler_hints": {}}
        cpu, wall = [], []
        started, beats = time.monotonic(), 0
        for _ in range(args.warmup + args.decisions):
            if args.heartbeats:
                beats = await heartbeat_due(db, service_ids, started, beats, cfg.report_interval)
            c0, w0 = time.process_time(), time.perf_counter()
            await manager.select_destinations(None, spec, [str(uuid.uuid4())])
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        cpu, wall = cpu[args.warmup:], wall[args.warmup:]
    finally:
        await db.dispose()

    def ms(value: float) -> float:
        return round(value * 1000, 2)
    return {"backend": args.backend, "hosts": args.hosts, "decisions": args.decisions,
            "heartbeats": args.heartbeats,
            "cpu_ms": {"p50": ms(percentile(cpu, 0.5)), "mean": ms(statistics.fmean(cpu)),
                       "p99": ms(percentile(cpu, 0.99))},
            "wall_ms_p50": ms(percentile(wall, 0.5)), "heartbeats_written": beats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5, help="decisions run first, not counted")
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "mysql"], default="sqlite")
    parser.add_argument("--heartbeats", action="store_true", help="hosts heartbeat between decisions")
    args = parser.parse_args()
    reference_before = reference_timeit()
    with database_url(args.backend) as url:
        result = asyncio.run(run(args, url))
    result["reference_timeit_ms"] = [reference_before, reference_timeit()]
    result["loadavg"] = loadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
