"""Scale benchmark: a multi-process control plane over RabbitMQ + PostgreSQL, with many simulated
compute hosts (``nefos simulate-hosts``, fake driver) in a few processes; servers booted in waves.

The control plane: identity, image, network, api, and ``--schedulers`` scheduler and conductor
processes, each its own process; ``--hosts`` simulated hosts over ``--host-procs`` processes.
PostgreSQL is a server of the bench's own (tests/database_servers.py, max_connections 100 as
PostgreSQL's default), so its statistics and its processes' CPU are this cloud's alone; the
RabbitMQ vhost is the bench's own (created and deleted with rabbitmqctl), so its connections'
frame counts are this cloud's alone. RabbitMQ's CPU is the whole broker's (shared with whatever
else runs on the machine).

Reports, as JSON:
  idle          per 1000 hosts and second, with no server booting: PostgreSQL commits and rows
                written/read (pg_stat_database deltas), AMQP frames in/out of the vhost's
                connections (rabbitmqctl list_connections recv_cnt/send_cnt)
  waves         per wave: servers/s to ACTIVE, create p50/p99, CPU ms per server of Nefos'
                processes, PostgreSQL's and RabbitMQ's
  scheduler     each scheduler's decision time p50/p99 (``scheduler.<host>`` decision_stats)
  invariants    every server ACTIVE, no node overcommitted, usage = sum of allocations, every
                compute service up (the run exits 1, after the report, when one is broken)
  connections   the most backends of the cloud's database seen (pg_stat_activity) and the budget

  python bench/scale.py --small                      # 100 hosts / 1000 servers
  python bench/scale.py                              # 1000 hosts in 4 processes / 10 000 servers
  python bench/scale.py --schedulers 2 --small
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "bench")]

from boot import (  # noqa: E402
    admin_token, broker_pids, percentile, postgres_pids, process_cpu_seconds, reference_timeit)
from nefos.cmd.allinone import free_port  # noqa: E402
from nefos.db.connection_budget import deployment_budget  # noqa: E402
from nefos.http_client import verified_tls

BIN = Path(sys.executable).parent
AMQP = os.environ.get("NEFOS_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def rabbitmqctl(*args: str) -> str:
    return subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True,
                          timeout=60).stdout


def check_alive(procs: dict[str, subprocess.Popen], state: Path) -> None:
    dead = [n for n, p in procs.items() if p.poll() is not None]
    if dead:
        raise SystemExit(f"{dead} exited; logs in {state}")


def terminate(procs: dict[str, subprocess.Popen], timeout: float) -> None:
    """SIGTERM every process, then wait for each (killed after ``timeout`` seconds)."""
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()



class ScaleCloud:
    def __init__(self, args):
        from tests.database_servers import OwnPostgres
        self.args = args
        self.state = Path(tempfile.mkdtemp(prefix="nefos-scale-"))
        self.pg = OwnPostgres(max_connections=100)
        self.vhost = f"nefos-scale-{uuid.uuid4().hex[:8]}"
        self.ports = {n: free_port() for n in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
        self.procs: dict[str, subprocess.Popen] = {}
        self.schedulers = [f"scale-scheduler-{i + 1}" for i in range(args.schedulers)]
        self.budget = deployment_budget(max_connections=100, processes=self.process_count())

    def process_count(self) -> int:
        return 4 + 2 * self.args.schedulers + self.args.host_procs  # identity image network api

    def start(self) -> None:
        self.pg.start()
        self.db_url = self.pg.create_database("nefos")
        rabbitmqctl("add_vhost", self.vhost)
        rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        self.env = dict(os.environ, NEFOS_DATABASE_URL=self.db_url, NEFOS_BUS_URL=AMQP + self.vhost,
                        NEFOS_QUOTA_INSTANCES="-1", NEFOS_QUOTA_CORES="-1", NEFOS_QUOTA_RAM="-1",
                        NEFOS_QUOTA_PORTS="-1", NEFOS_METADATA_LISTEN_PORT=str(free_port()),
                        NEFOS_NOVNCPROXY_PORT=str(free_port()), NEFOS_DASHBOARD_PORT=str(free_port()),
                        NEFOS_MAX_POOL_SIZE=str(self.budget["max_pool_size"]),
                        NEFOS_MAX_OVERFLOW=str(self.budget["max_overflow"]))
        for name, port in self.ports.items():
            self.env[f"NEFOS_{name}_API_PORT"] = str(port)
        subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(self.state)],
                       env=self.env, check=True, capture_output=True)
        for name in ("identity", "image", "network"):
            self._spawn(name, [name], host="scale-controller")
        for i, host in enumerate(self.schedulers):
            self._spawn(host, ["scheduler"], host=host)
            self._spawn(f"scale-conductor-{i + 1}", ["conductor"], host=f"scale-conductor-{i + 1}")
        self._spawn("api", ["api"], host="scale-controller")
        per = -(-self.args.hosts // self.args.host_procs)
        for p in range(self.args.host_procs):
            first = p * per + 1
            count = min(per, self.args.hosts - p * per)
            if count > 0:
                self._spawn(f"hosts-{p + 1}", ["simulate-hosts", "--count", str(count), "--first", str(first),
                                               "--host-prefix", "sim"], host=f"scale-hostproc-{p + 1}")

    def _spawn(self, name: str, args: list[str], host: str) -> None:
        log = open(self.state / f"{name}.log", "w")
        env = dict(self.env, NEFOS_HOST=host)
        self.procs[name] = subprocess.Popen([str(BIN / "nefos"), *args, "--state-dir", str(self.state)],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)

    def nefos_pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def postgres_pids(self) -> list[int]:
        return postgres_pids(self.pg)

    def check_alive(self) -> None:
        check_alive(self.procs, self.state)

    def stop(self) -> None:
        terminate(self.procs, timeout=60)
        try:
            rabbitmqctl("delete_vhost", self.vhost)
        finally:
            self.pg.destroy()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


async def pg_stats(cloud: ScaleCloud) -> dict:
    import asyncpg
    conn = await asyncpg.connect(cloud.pg.url("postgres"))
    try:
        row = await conn.fetchrow(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched "
            "FROM pg_stat_database WHERE datname = 'nefos'")
        backends = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = 'nefos'")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
    finally:
        await conn.close()
    return dict(row, backends=backends)


def amqp_frames(cloud: ScaleCloud) -> dict:
    out = rabbitmqctl("list_connections", "vhost", "recv_cnt", "send_cnt")
    recv = sent = conns = 0
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == cloud.vhost:
            recv += int(parts[1])
            sent += int(parts[2])
            conns += 1
    return {"frames_in": recv, "frames_out": sent, "connections": conns}


class Sampler:
    """The most backends of the cloud's database seen, sampled every second meanwhile."""

    def __init__(self, cloud: ScaleCloud):
        self.cloud, self.most = cloud, 0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            try:
                self.most = max(self.most, (await pg_stats(self.cloud))["backends"])
            except Exception:
                pass
            await asyncio.sleep(1)

    def __enter__(self):
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc):
        self._task.cancel()


async def wait_hosts(cloud: ScaleCloud, client, headers) -> float:
    started = time.monotonic()
    while True:
        cloud.check_alive()
        try:
            r = await client.get(cloud.url("COMPUTE") + "/v2.1/os-hypervisors/statistics", headers=headers)
            if r.status_code == 200 and r.json()["hypervisor_statistics"]["count"] >= cloud.args.hosts:
                return round(time.monotonic() - started, 1)
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > cloud.args.start_timeout:
            raise SystemExit(f"hosts did not all report; logs in {cloud.state}")
        await asyncio.sleep(1)


async def measure_idle(cloud: ScaleCloud, seconds: float) -> dict:
    before_pg, before_bus = await pg_stats(cloud), amqp_frames(cloud)
    t = time.monotonic()
    cpu = process_cpu_seconds(cloud.nefos_pids())
    await asyncio.sleep(seconds)
    after_pg, after_bus = await pg_stats(cloud), amqp_frames(cloud)
    elapsed = time.monotonic() - t
    cpu = process_cpu_seconds(cloud.nefos_pids()) - cpu
    per = 1000 / cloud.args.hosts / elapsed

    def rate(after, before, key):
        return round((after[key] - before[key]) * per, 1)
    return {"seconds": round(elapsed, 1),
            "per_1000_hosts_per_s": {
                "db_commits": rate(after_pg, before_pg, "xact_commit"),
                "db_rows_written": round(sum(after_pg[k] - before_pg[k] for k in
                                             ("tup_inserted", "tup_updated", "tup_deleted")) * per, 1),
                "db_rows_updated": rate(after_pg, before_pg, "tup_updated"),
                "db_rows_read": round(sum(after_pg[k] - before_pg[k] for k in ("tup_returned", "tup_fetched"))
                                      * per, 1),
                "amqp_frames_in": rate(after_bus, before_bus, "frames_in"),
                "amqp_frames_out": rate(after_bus, before_bus, "frames_out"),
                "nefos_cpu_percent": round(cpu * 100 * 1000 / cloud.args.hosts / elapsed, 1)},
            "amqp_connections": after_bus["connections"], "db_backends": after_pg["backends"]}


async def boot_waves(cloud: ScaleCloud, client, headers, image: str, net: str) -> list[dict]:
    args = cloud.args
    sem = asyncio.Semaphore(args.concurrency)
    waves = []
    total = 0
    brokers = broker_pids()
    while total < args.servers:
        n = min(args.wave, args.servers - total)
        latencies: list[float] = []
        ids: list[str] = []

        async def create(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(cloud.url("COMPUTE") + "/v2.1/servers", headers=headers, json={"server": {
                    "name": f"scale-{i}", "imageRef": image, "flavorRef": "42", "networks": [{"uuid": net}]}})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 202:
                    raise SystemExit(f"create failed: {r.status_code} {r.text}")
                ids.append(r.json()["server"]["id"])

        pg_pids = cloud.postgres_pids()
        cpu = {"nefos": process_cpu_seconds(cloud.nefos_pids()), "postgresql": process_cpu_seconds(pg_pids),
               "rabbitmq": process_cpu_seconds(brokers)}
        db0 = await pg_stats(cloud)
        start = time.perf_counter()
        await asyncio.gather(*(create(total + i) for i in range(n)))
        pending = set(ids)
        while pending:
            cloud.check_alive()
            r = await client.get(cloud.url("COMPUTE") + "/v2.1/servers", headers=headers,
                                 params={"status": "ACTIVE", "limit": 1000,
                                         "changes-since": (dt.datetime.now(dt.timezone.utc)
                                                           - dt.timedelta(seconds=time.perf_counter() - start + 5)
                                                           ).strftime("%Y-%m-%dT%H:%M:%SZ")})
            for s in r.json()["servers"]:
                pending.discard(s["id"])
            if len(r.json()["servers"]) == 1000:  # more than a page changed: look at each pending one
                for sid in list(pending)[:200]:
                    rs = await client.get(cloud.url("COMPUTE") + f"/v2.1/servers/{sid}", headers=headers)
                    if rs.json()["server"]["status"] == "ACTIVE":
                        pending.discard(sid)
            if time.perf_counter() - start > args.timeout:
                raise SystemExit(f"wave {len(waves) + 1}: {len(pending)} not ACTIVE after {args.timeout} s")
            await asyncio.sleep(0.5)
        elapsed = time.perf_counter() - start
        db1 = await pg_stats(cloud)
        used = {"nefos": process_cpu_seconds(cloud.nefos_pids()) - cpu["nefos"],
                "postgresql": process_cpu_seconds(pg_pids) - cpu["postgresql"],
                "rabbitmq": process_cpu_seconds(brokers) - cpu["rabbitmq"]}
        total += n
        waves.append({"servers_before": total - n, "servers": n, "seconds": round(elapsed, 1),
                      "boots_per_s": round(n / elapsed, 1),
                      "create_p50_ms": round(percentile(latencies, 50) * 1000, 1),
                      "create_p99_ms": round(percentile(latencies, 99) * 1000, 1),
                      "db_commits_per_server": round((db1["xact_commit"] - db0["xact_commit"]) / n, 1),
                      "cpu_ms_per_server": {k: round(v / n * 1000, 1) for k, v in used.items()},
                      "load": loadavg()})
        print(f"wave {len(waves)}: {json.dumps(waves[-1])}", file=sys.stderr, flush=True)  # a cut run keeps its waves
        print(json.dumps(waves[-1]), file=sys.stderr, flush=True)
    return waves


async def scheduler_stats(cloud: ScaleCloud) -> list[dict]:
    from nefos.bus.rabbit import RabbitBus
    bus = RabbitBus(AMQP + cloud.vhost, control_exchange="nefos")
    await bus.start()
    try:
        from nefos.bus import interfaces
        from nefos.bus.versioning import RPCClient
        from nefos.context import admin_context
        scheduler = RPCClient(bus, interfaces.SCHEDULER)
        # The bus refuses a message without a context: the bench asks as the service itself would.
        return [await scheduler.call(admin_context(), "decision_stats", host=h) for h in cloud.schedulers]
    finally:
        await bus.stop()


async def invariants(cloud: ScaleCloud) -> dict:
    import asyncpg
    conn = await asyncpg.connect(cloud.db_url.replace("postgresql://", "postgres://"))
    try:
        states = dict(await conn.fetch("SELECT vm_state, count(*) FROM instances WHERE deleted = 0 GROUP BY 1"))
        overcommitted = await conn.fetchval(
            "SELECT count(*) FROM compute_nodes WHERE deleted = 0 AND (vcpus_used > vcpus * cpu_allocation_ratio "
            "OR memory_mb_used > memory_mb * ram_allocation_ratio OR local_gb_used > local_gb * disk_allocation_ratio)")
        mismatched = await conn.fetchval(
            "SELECT count(*) FROM compute_nodes n LEFT JOIN (SELECT compute_node_id, sum(memory_mb) AS mem "
            "FROM allocations GROUP BY 1) a ON a.compute_node_id = n.id "
            "WHERE n.deleted = 0 AND n.memory_mb_used <> coalesce(a.mem, 0)")
        stale = await conn.fetchval(
            "SELECT count(*) FROM services WHERE deleted = 0 AND \"binary\" = 'nova-compute' "
            "AND last_seen_up < now() AT TIME ZONE 'utc' - interval '60 seconds'")
        hosts_used = await conn.fetchval("SELECT count(DISTINCT host) FROM instances WHERE deleted = 0")
    finally:
        await conn.close()
    return {"vm_states": states, "nodes_overcommitted": overcommitted, "nodes_usage_mismatch": mismatched,
            "compute_services_down": stale, "hosts_with_servers": hosts_used}


def broken_invariants(found: dict, servers: int) -> list[str]:
    """What ``invariants`` found that they forbid."""
    broken = []
    if set(found["vm_states"]) - {"active"} or found["vm_states"].get("active", 0) != servers:
        broken.append(f"not every server ACTIVE: {found['vm_states']}")
    broken += [f"{key} {found[key]}" for key in ("nodes_overcommitted", "nodes_usage_mismatch",
                                                 "compute_services_down") if found[key]]
    return broken


async def run(args, cloud: ScaleCloud) -> dict:
    result: dict = {}
    async with httpx.AsyncClient(verify=verified_tls(),
                                 timeout=300, limits=httpx.Limits(max_connections=args.concurrency * 2)) as client:
        token = await admin_token(cloud, client)
        headers = {"X-Auth-Token": token}
        with Sampler(cloud) as sampler:
            result["hosts_up_after_s"] = await wait_hosts(cloud, client, headers)
            await asyncio.sleep(args.settle)  # start-up transients (first periodic passes) behind us
            result["idle"] = await measure_idle(cloud, args.idle_seconds)
            print(f"idle: {json.dumps(result['idle'])}", file=sys.stderr, flush=True)
            r = await client.post(cloud.url("NETWORK") + "/v2.0/networks", headers=headers,
                                  json={"network": {"name": "scale", "shared": True}})
            net = r.json()["network"]["id"]
            await client.post(cloud.url("NETWORK") + "/v2.0/subnets", headers=headers, json={"subnet": {
                "network_id": net, "cidr": "10.128.0.0/14", "ip_version": 4}})
            r = await client.get(cloud.url("IMAGE") + "/v2/images", headers=headers, params={"name": "nefos-tiny"})
            image = r.json()["images"][0]["id"]
            result["waves"] = await boot_waves(cloud, client, headers, image, net)
            result["idle_after"] = await measure_idle(cloud, args.idle_seconds)
            result["connections"] = {"most_backends_seen": sampler.most, **cloud.budget}
    result["scheduler"] = await scheduler_stats(cloud)
    result["invariants"] = await invariants(cloud)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--host-procs", type=int, default=4)
    parser.add_argument("--servers", type=int, default=10000)
    parser.add_argument("--wave", type=int, default=1000)
    parser.add_argument("--schedulers", type=int, default=1, help="scheduler and conductor processes each")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--settle", type=float, default=15)
    parser.add_argument("--timeout", type=float, default=1800, help="per wave")
    parser.add_argument("--start-timeout", type=float, default=600)
    parser.add_argument("--small", action="store_true", help="100 hosts in 2 processes, 1000 servers in waves of 500")
    args = parser.parse_args()
    if args.small:
        args.hosts, args.host_procs, args.servers, args.wave = 100, 2, 1000, 500
    cloud = ScaleCloud(args)
    result = {"date": dt.datetime.now().isoformat(timespec="seconds"),
              "machine": f"{platform.node()} {os.cpu_count()} cores {platform.machine()}",
              "load_before": loadavg(), "reference_timeit_ms": reference_timeit(),
              "hosts": args.hosts, "host_procs": args.host_procs, "servers": args.servers,
              "schedulers": args.schedulers, "conductors": args.schedulers, "concurrency": args.concurrency}
    cloud.start()
    try:
        result.update(asyncio.run(run(args, cloud)))
        result["load_after"] = loadavg()
        result["reference_timeit_ms_after"] = reference_timeit()
        print(json.dumps(result, indent=2))
    finally:
        cloud.stop()
    broken = broken_invariants(result["invariants"], args.servers)
    if broken:
        raise SystemExit("invariants broken: " + "; ".join(broken))


if __name__ == "__main__":
    main()
