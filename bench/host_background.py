"""What idle compute hosts cost in the background (heartbeats, periodic tasks, and the conductor
serving them), with 0, 1, 10, 100 servers per host: the cost must not grow with the servers.

For each fill level a fresh cloud of its own: PostgreSQL (tests/database_servers.py), a RabbitMQ
vhost, one conductor process and ``--hosts`` simulated hosts (``nefos simulate-hosts``, fake
driver) in ``--host-procs`` processes; nothing else (no API, scheduler or network service: idle
hosts do not talk to them). Servers are not booted: before anything starts, each host's
instances are inserted as a boot leaves them (``instances`` rows ACTIVE / running on the host and
node, a finished ``create`` action each; no allocations) and its fake hypervisor holds their
running guests (``fake_hypervisor_dir``), so the hosts start with them as after a restart.
Every periodic task's first run is spread over its whole interval (``periodic_fuzzy_delay``
600 s, the power-sync interval), so a window sees each task at its steady rate.

Reports, as JSON, per fill level and per 1000 hosts and second over ``--idle-seconds``: CPU
(percent of one core) of the conductor, the host processes, PostgreSQL; database commits, rows
written and rows read (pg_stat_database); AMQP frames. ``--profile DIR`` runs the conductor and
the host processes under cProfile (CPU clock) and adds each periodic task's and each conductor
method's CPU share.

  python bench/host_background.py                     # 200 hosts in 2 processes, 0/1/10/100 per host
  python bench/host_background.py --fills 0,10 --hosts 100
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "bench")]

from boot import process_cpu_seconds, reference_timeit  # noqa: E402
from scale import AMQP, check_alive, loadavg, postgres_pids, rabbitmqctl, terminate  # noqa: E402

BIN = Path(sys.executable).parent
FUZZY = 600.0
PERIODIC = ("heartbeat", "periodic_update_available_resource", "periodic_sync_power_states",
            "periodic_check_instance_deadlines", "periodic_publish_vif_wait_stats")


class IdleCloud:
    def __init__(self, args, per_host: int):
        from tests.database_servers import OwnPostgres
        self.args, self.per_host = args, per_host
        self.state = Path(tempfile.mkdtemp(prefix="nefos-hostbg-"))
        self.pg = OwnPostgres(max_connections=100)
        self.vhost = f"nefos-hostbg-{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.hosts = [f"sim-{i}" for i in range(1, args.hosts + 1)]

    def start(self) -> None:
        self.pg.start()
        self.db_url = self.pg.create_database("nefos")
        rabbitmqctl("add_vhost", self.vhost)
        rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        self.env = dict(os.environ, NEFOS_DATABASE_URL=self.db_url, NEFOS_BUS_URL=AMQP + self.vhost,
                        NEFOS_FAKE_HYPERVISOR_DIR=str(self.state / "hypervisors"),
                        NEFOS_PERIODIC_FUZZY_DELAY=str(FUZZY), NEFOS_MAX_POOL_SIZE="20",
                        NEFOS_MAX_OVERFLOW="0")
        subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(self.state)],
                       env=self.env, check=True, capture_output=True)
        asyncio.run(self.fill())
        self._spawn("conductor", ["conductor"], host="hostbg-conductor")
        per = -(-self.args.hosts // self.args.host_procs)
        for p in range(self.args.host_procs):
            first, count = p * per + 1, min(per, self.args.hosts - p * per)
            self._spawn(f"hosts-{p + 1}", ["simulate-hosts", "--count", str(count), "--first", str(first),
                                           "--host-prefix", "sim"], host=f"hostbg-hostproc-{p + 1}")

    async def fill(self) -> None:
        """Each host's servers as a boot leaves them: the rows, and the guests on its hypervisor."""
        import asyncpg
        hyp = self.state / "hypervisors"
        hyp.mkdir()
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(hours=2)
        flavor = json.dumps({"id": "42", "name": "m1.nano", "vcpus": 1, "memory_mb": 64, "root_gb": 1,
                             "ephemeral_gb": 0, "swap": 0, "extra_specs": {}})
        instances, actions = [], []
        for host in self.hosts:
            guests = []
            for i in range(self.per_host):
                u = str(uuid.uuid4())
                instances.append((u, "bench-project", "bench-user", f"{host}-{i}", f"{host}-{i}", "active", None, 1,
                                  host, host, host, "nova", flavor, 1, 64, 1, 0, "{}", "{}", "[]", "[]", 0,
                                  False, 0, now, now, now, 0, False))
                actions.append(("create", u, f"req-{u}", "bench-user", "bench-project", now, now, None, now, now))
                guests.append({"uuid": u, "name": f"instance-{u}", "power_state": 1, "vcpus": 1, "memory_mb": 64,
                               "vifs": [], "paused_start": False, "admin_password": None, "rescue": None})
            (hyp / f"{host}.json").write_text(json.dumps({"guests": guests, "plugged_vifs": {}}))
        conn = await asyncpg.connect(self.db_url.replace("postgresql+asyncpg://", "postgres://")
                                     .replace("postgresql://", "postgres://"))
        try:
            await conn.executemany(
                "INSERT INTO instances (uuid, project_id, user_id, display_name, hostname, vm_state, task_state,"
                " power_state, host, node, launched_on, availability_zone, flavor, vcpus, memory_mb, root_gb,"
                " ephemeral_gb, metadata, system_metadata, security_groups, network_info, launch_index, locked,"
                " progress, created_at, updated_at, launched_at, deleted, cleaned) VALUES ($1, $2, $3, $4, $5,"
                " $6, $7, $8, $9, $10, $11, $12, $13::json, $14, $15, $16, $17, $18::json, $19::json, $20::json,"
                " $21::json, $22, $23, $24, $25, $26, $27, $28, $29)", instances)
            await conn.executemany(
                "INSERT INTO instance_actions (action, instance_uuid, request_id, user_id, project_id, start_time,"
                " finish_time, message, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                actions)
            await conn.execute("ANALYZE")
        finally:
            await conn.close()

    def _spawn(self, name: str, args: list[str], host: str) -> None:
        log = open(self.state / f"{name}.log", "w")
        prefix = []
        if self.args.profile:
            out = Path(self.args.profile) / f"fill{self.per_host}.{name}.prof"
            prefix = [sys.executable, str(ROOT / "bench" / "cpu_profile.py"), str(out)]
        self.procs[name] = subprocess.Popen([*prefix, str(BIN / "nefos"), *args, "--state-dir", str(self.state)],
                                            env=dict(self.env, NEFOS_HOST=host), stdout=log,
                                            stderr=subprocess.STDOUT)

    def pids(self, prefix: str) -> list[int]:
        return [p.pid for n, p in self.procs.items() if n.startswith(prefix)]

    def postgres_pids(self) -> list[int]:
        return postgres_pids(self.pg)

    def check_alive(self) -> None:
        check_alive(self.procs, self.state)

    def stop(self) -> None:
        terminate(self.procs, timeout=120)
        try:
            if self.vhost in rabbitmqctl("list_vhosts"):
                rabbitmqctl("delete_vhost", self.vhost)
        finally:
            self.pg.destroy()
            shutil.rmtree(self.state, ignore_errors=True)


async def pg_stats(cloud: IdleCloud) -> dict:
    import asyncpg
    conn = await asyncpg.connect(cloud.pg.url("postgres"))
    try:
        row = await conn.fetchrow(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched "
            "FROM pg_stat_database WHERE datname = 'nefos'")
    finally:
        await conn.close()
    tables = await table_stats(cloud)
    return dict(row, tables=tables)


async def table_stats(cloud: IdleCloud) -> dict:
    import asyncpg
    conn = await asyncpg.connect(cloud.pg.url("nefos"))
    try:
        rows = await conn.fetch("SELECT relname, seq_scan, seq_tup_read, idx_scan, idx_tup_fetch, n_tup_upd "
                                "FROM pg_stat_user_tables")
    finally:
        await conn.close()
    return {r["relname"]: dict(r) for r in rows}


async def hosts_reported(cloud: IdleCloud) -> int:
    import asyncpg
    conn = await asyncpg.connect(cloud.pg.url("nefos"))
    try:
        return await conn.fetchval("SELECT count(*) FROM compute_nodes WHERE deleted = 0")
    finally:
        await conn.close()


def frames(cloud: IdleCloud) -> int:
    out = rabbitmqctl("list_connections", "vhost", "recv_cnt", "send_cnt")
    total = 0
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == cloud.vhost:
            total += int(parts[1]) + int(parts[2])
    return total


async def measure(cloud: IdleCloud) -> dict:
    args = cloud.args
    started = time.monotonic()
    while await hosts_reported(cloud) < args.hosts:
        cloud.check_alive()
        if time.monotonic() - started > args.start_timeout:
            raise SystemExit(f"hosts did not all report; logs in {cloud.state}")
        await asyncio.sleep(2)
    up_after = round(time.monotonic() - started, 1)
    await asyncio.sleep(args.settle)  # the start-up's own work (init_host of every host) behind us
    groups = {"conductor": cloud.pids("conductor"), "hosts": cloud.pids("hosts-"), "postgresql": cloud.postgres_pids()}
    cpu0 = {k: process_cpu_seconds(v) for k, v in groups.items()}
    pg0, fr0, t0 = await pg_stats(cloud), frames(cloud), time.monotonic()
    await asyncio.sleep(args.idle_seconds)
    cloud.check_alive()
    pg1, fr1, elapsed = await pg_stats(cloud), frames(cloud), time.monotonic() - t0
    per = 1000 / args.hosts / elapsed
    cpu = {f"{k}_cpu_percent": round((process_cpu_seconds(v) - cpu0[k]) * 100 * per, 1) for k, v in groups.items()}
    return {"servers_per_host": cloud.per_host, "servers_per_1000_hosts": cloud.per_host * 1000,
            "hosts_up_after_s": up_after, "seconds": round(elapsed, 1), "per_1000_hosts_per_s": {
                **cpu, "nefos_cpu_percent": round(cpu["conductor_cpu_percent"] + cpu["hosts_cpu_percent"], 1),
                "db_commits": round((pg1["xact_commit"] - pg0["xact_commit"]) * per, 1),
                "db_rows_written": round(sum(pg1[k] - pg0[k] for k in ("tup_inserted", "tup_updated", "tup_deleted"))
                                         * per, 1),
                "db_rows_read": round(sum(pg1[k] - pg0[k] for k in ("tup_returned", "tup_fetched")) * per, 1),
                "amqp_frames": round((fr1 - fr0) * per, 1)},
            "tables_per_1000_hosts_per_s": table_rates(pg0["tables"], pg1["tables"], per),
            "load": loadavg()}


def table_rates(before: dict, after: dict, per: float) -> dict:
    """Per table: scans and rows read (sequential and by index) and rows updated, per second."""
    out = {}
    for name, a in after.items():
        b = before.get(name, {})
        rates = {k: round(((a[k] or 0) - (b.get(k) or 0)) * per, 1)
                 for k in ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "n_tup_upd")}
        if any(rates.values()):
            out[name] = rates
    return out


def profile_shares(directory: Path, per_host: int) -> dict:
    """Each periodic task's cumulative CPU in the host processes, each host-surface method's in the
    conductor (seconds over the whole run, start-up included)."""
    out = {}
    for role, names in (("hosts", PERIODIC), ("conductor", None)):
        files = sorted(directory.glob(f"fill{per_host}.{role}*.prof"))
        if not files:
            continue
        stats = pstats.Stats(*map(str, files))
        shares = {}
        for (path, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
            if names is not None and func in names and "nefos" in path:
                shares[func] = round(shares.get(func, 0) + ct, 2)
            elif names is None and path.endswith("conductor/host_surface.py"):
                shares[func] = round(ct, 2)
        out[role] = dict(sorted(shares.items(), key=lambda kv: -kv[1])[:15])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--host-procs", type=int, default=2)
    parser.add_argument("--fills", default="0,1,10,100", help="servers per host, one cloud each")
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--settle", type=float, default=30)
    parser.add_argument("--start-timeout", type=float, default=600)
    parser.add_argument("--profile", metavar="DIR", help="cProfile (CPU clock) the conductor and hosts into DIR")
    args = parser.parse_args()
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    result = {"date": dt.datetime.now().isoformat(timespec="seconds"),
              "machine": f"{platform.node()} {os.cpu_count()} cores {platform.machine()}",
              "load_before": loadavg(), "reference_timeit_ms": reference_timeit(),
              "hosts": args.hosts, "host_procs": args.host_procs, "levels": []}
    for per_host in (int(f) for f in args.fills.split(",")):
        cloud = IdleCloud(args, per_host)
        try:
            cloud.start()
            level = asyncio.run(measure(cloud))
        finally:
            cloud.stop()
        if args.profile:
            level["profile_cpu_s"] = profile_shares(Path(args.profile), per_host)
        print(json.dumps(level), file=sys.stderr, flush=True)
        result["levels"].append(level)
    result["load_after"] = loadavg()
    result["reference_timeit_ms_after"] = reference_timeit()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
