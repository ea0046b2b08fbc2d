"""Boot benchmark: N servers over M fake hosts through the REST API.

Modes:
  all-in-one     `nefos up` (SQLite, in-process bus) as a child process
  multi-process  every service its own process, RabbitMQ + PostgreSQL (NEFOS_BENCH_AMQP_URL,
                 default on 127.0.0.1; NEFOS_BENCH_PG_ADMIN_URL, default a PostgreSQL server of
                 the bench's own, tests/database_servers.py)

Prints servers/s to ACTIVE, p50/p99 create-request latency, and the time of
`GET /v2.1/servers/detail?limit=1000` with 10 000 servers in the database.

`--stream-clients N`: N clients (another process, as the admin: every event) follow the event
stream (`GET /v2.1/nefos-events`) from before the first create to the last ACTIVE; the figures
say how many events each received.

  python bench/boot.py --servers 1000 --hosts 10 --concurrency 50
  python bench/boot.py --mode multi-process --servers 300 --hosts 10
  python bench/boot.py --servers 300 --skip-list --stream-clients 10
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nefos.cmd.allinone import free_port  # noqa: E402
from nefos.config import Config  # noqa: E402
from nefos.http_client import verified_tls

BIN = Path(sys.executable).parent
SERVICES = [["identity"], ["image"], ["network"], ["scheduler"], ["conductor"], ["api"]]


def reference_timeit() -> float:
    """The machine's speed now: ms per ``sum(range(10**6))`` (python3 -m timeit -n 20's loop, best of 3)."""
    import timeit
    return round(min(timeit.repeat("sum(range(10**6))", number=20, repeat=3)) / 20 * 1000, 1)


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))
    return values[k]


class Cloud:
    def __init__(self, args):
        self.args = args
        self.state = Path(tempfile.mkdtemp(prefix="nefos-bench-"))
        self.ports = {n: free_port() for n in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
        self.env = dict(os.environ, NEFOS_QUOTA_INSTANCES="-1", NEFOS_QUOTA_CORES="-1",
                        NEFOS_QUOTA_RAM="-1", NEFOS_QUOTA_PORTS="-1")
        for name, port in self.ports.items():
            self.env[f"NEFOS_{name}_API_PORT"] = str(port)
        self.env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())
        self.env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
        self.env["NEFOS_DASHBOARD_PORT"] = str(free_port())
        for cap in ("event_stream_max_per_user", "event_stream_max_clients"):  # the stream clients are all the admin's
            self.env[f"NEFOS_{cap.upper()}"] = str(max(args.stream_clients, Config.model_fields[cap].default))
        self.procs: list[subprocess.Popen] = []
        self.db_url = f"sqlite:///{self.state / 'nefos.sqlite'}"
        self.pg_name = None
        self.own_pg = None

    def _spawn(self, *args: str) -> None:
        log = open(self.state / f"{'-'.join(args)[:40]}.log", "w")
        # --profile: each process under cProfile (written when it stops on SIGTERM); the
        # multi-process cloud's to FILE.<service>.
        out = self.args.profile if args[0] == "up" else f"{self.args.profile}.{'-'.join(args)[:40]}"
        if not self.args.profile:
            prefix = []
        elif self.args.profile_clock == "cpu":
            prefix = [sys.executable, str(Path(__file__).with_name("cpu_profile.py")), out]
        else:
            prefix = [sys.executable, "-m", "cProfile", "-o", out]
        env = dict(self.env)
        if args[0] == "compute":  # computes sharing a state directory each keep their own identity
            env["NEFOS_COMPUTE_ID_PATH"] = str(self.state / f"compute_id.{args[2]}")
        self.procs.append(subprocess.Popen([*prefix, str(BIN / "nefos"), *args, "--state-dir", str(self.state)],
                                           env=env, stdout=log, stderr=subprocess.STDOUT))

    def start(self) -> None:
        if self.args.mode == "all-in-one":
            self._spawn("up", "--fake-hosts", str(self.args.hosts), "--driver", "fake")
        else:
            import asyncpg  # noqa: F401  (fail early when missing)
            self.pg_name = f"nefos_bench_{uuid.uuid4().hex[:8]}"
            admin = os.environ.get("NEFOS_BENCH_PG_ADMIN_URL")
            if admin is None:  # a PostgreSQL of the bench's own: the machine's shared one keeps its connections
                sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
                from tests.database_servers import OwnPostgres
                self.own_pg = OwnPostgres(max_connections=100)
                self.own_pg.start()
                admin = self.own_pg.url("postgres")
            asyncio.run(_pg(admin, f'CREATE DATABASE "{self.pg_name}"'))
            self.db_url = admin.rsplit("/", 1)[0] + f"/{self.pg_name}"
            self.env.update(NEFOS_DATABASE_URL=self.db_url,
                            NEFOS_BUS_URL=os.environ.get("NEFOS_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
                            NEFOS_HOST=f"bench-{uuid.uuid4().hex[:6]}",
                            NEFOS_CONTROL_EXCHANGE=f"nefos-bench-{uuid.uuid4().hex[:6]}",
                            # 16 processes share PostgreSQL's 100 connections (nefos.db.connection_budget).
                            NEFOS_MAX_POOL_SIZE="5", NEFOS_MAX_OVERFLOW="0")
            subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(self.state)],
                           env=self.env, check=True, capture_output=True)
            for args in SERVICES:
                self._spawn(*args)
            for i in range(self.args.hosts):
                self._spawn("compute", "--host", f"bench-compute-{i + 1}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.own_pg is not None:
            self.own_pg.destroy()
        elif self.pg_name:
            admin = os.environ["NEFOS_BENCH_PG_ADMIN_URL"]
            asyncio.run(_pg(admin, f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)'))

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def pids_by_service(self) -> dict[str, list[int]]:
        """The processes by what they run ("up", "api", "compute", ...)."""
        groups: dict[str, list[int]] = {}
        for proc in self.procs:
            argv = proc.args
            service = argv[argv.index(str(BIN / "nefos")) + 1]
            groups.setdefault(service, []).append(proc.pid)
        return groups


async def _pg(url: str, sql: str) -> None:
    import asyncpg
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def admin_token(cloud: Cloud, client: httpx.AsyncClient) -> str:
    deadline = time.monotonic() + 90
    passwords = cloud.state / "passwords.yaml"
    while not passwords.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the cloud did not start; logs in " + str(cloud.state))
        await asyncio.sleep(0.2)
    creds = yaml.safe_load(passwords.read_text())
    password = creds.get("admin") if isinstance(creds.get("admin"), str) else creds["admin"]["password"]
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"id": "default"}, "password": password}}},
        "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}
    while True:
        try:
            r = await client.post(cloud.url("IDENTITY") + "/v3/auth/tokens", json=body)
            if r.status_code == 201:
                return r.headers["x-subject-token"]
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("no token; logs in " + str(cloud.state))
        await asyncio.sleep(0.3)


async def wait_ready(cloud: Cloud, client: httpx.AsyncClient, headers: dict, hosts: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            r = await client.get(cloud.url("COMPUTE") + "/v2.1/os-hypervisors", headers=headers)
            if r.status_code == 200 and len(r.json()["hypervisors"]) >= hosts:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("compute hosts did not report; logs in " + str(cloud.state))
        await asyncio.sleep(0.3)


async def count_status(cloud: Cloud, client, headers, status: str, seen: set[str] | None = None,
                       since: str | None = None) -> int:
    """Servers whose status is ``status`` (the plain list, following its pages).

    Not os-hypervisors' running_vms: as in Nova, that counts every instance claimed on a
    host, building ones included. With ``seen`` and ``since``, only servers changed since
    then are listed and added to ``seen`` (an ACTIVE server here stays ACTIVE), so polling
    does not list every server again and again: that listing is CPU the cloud would
    otherwise spend on the boots being measured."""
    seen = set() if seen is None else seen
    params = {"status": status, "limit": 1000}
    if since is not None:
        params["changes-since"] = since
    while True:
        r = await client.get(cloud.url("COMPUTE") + "/v2.1/servers", headers=headers, params=params)
        page = r.json()["servers"]
        seen.update(s["id"] for s in page)
        if len(page) < params["limit"]:
            return len(seen)
        params["marker"] = page[-1]["id"]


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def postgres_pids(pg) -> list[int]:
    """The processes of the bench's own PostgreSQL server ``pg``: the postmaster and its backends."""
    out = subprocess.run(["pgrep", "-u", "postgres", "-f", str(pg.data)], capture_output=True, text=True)
    parent = [int(p) for p in out.stdout.split()]
    children = subprocess.run(["pgrep", "-P", ",".join(map(str, parent)) or "0"], capture_output=True,
                              text=True).stdout.split()
    return parent + [int(c) for c in children]


def broker_pids() -> list[int]:
    """RabbitMQ's server process (the machine's: its CPU includes any other user's)."""
    return [int(p) for p in subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True,
                                           text=True).stdout.split()]


def beside(cloud: Cloud) -> dict[str, list[int]]:
    """The servers a multi-process cloud runs on, whose CPU is reported beside Nefos's own."""
    if cloud.args.mode != "multi-process":
        return {}
    servers = {"rabbitmq": broker_pids()}
    if cloud.own_pg is not None:
        servers["postgresql"] = postgres_pids(cloud.own_pg)
    return servers


async def boot(args, cloud: Cloud) -> dict:
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(verify=verified_tls(), timeout=120, limits=limits) as client:
        token = await admin_token(cloud, client)
        headers = {"X-Auth-Token": token}
        await wait_ready(cloud, client, headers, args.hosts)
        r = await client.post(cloud.url("NETWORK") + "/v2.0/networks", headers=headers,
                              json={"network": {"name": "bench", "shared": True}})
        net = r.json()["network"]["id"]
        await client.post(cloud.url("NETWORK") + "/v2.0/subnets", headers=headers, json={"subnet": {
            "network_id": net, "cidr": "10.128.0.0/16", "ip_version": 4}})
        r = await client.get(cloud.url("IMAGE") + "/v2/images", headers=headers, params={"name": "nefos-tiny"})
        image = r.json()["images"][0]["id"]
        latencies: list[float] = []
        sem = asyncio.Semaphore(args.concurrency)
        ids: list[str] = []

        async def create(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(cloud.url("COMPUTE") + "/v2.1/servers", headers=headers, json={"server": {
                    "name": f"bench-{i}", "imageRef": image, "flavorRef": "42", "networks": [{"uuid": net}]}})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 202:
                    raise SystemExit(f"create failed: {r.status_code} {r.text}")
                ids.append(r.json()["server"]["id"])

        streams = start_stream_clients(cloud, token, args.stream_clients) if args.stream_clients else None
        pids = [p.pid for p in cloud.procs]
        cpu_before = process_cpu_seconds(pids)
        by_service_before = {name: process_cpu_seconds(group) for name, group in cloud.pids_by_service().items()}
        # The database's backends are the pools' connections, open for the whole run.
        servers = beside(cloud)
        servers_before = {name: process_cpu_seconds(group) for name, group in servers.items()}
        poll_since: str | None = None  # the first poll lists everything
        start = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(args.servers)))
        created = time.perf_counter()
        active_ids: set[str] = set()
        counted, last_progress = 0, time.perf_counter()
        while True:
            # The server clock is this machine's: a margin of 2 s covers a poll's own length.
            since = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
            # A save committed more than the margin after its updated_at (a loaded machine) is
            # never in a changes-since listing: after 5 s without a new ACTIVE, list them all.
            stalled = time.perf_counter() - last_progress > 5
            active = await count_status(cloud, client, headers, "ACTIVE", active_ids,
                                        None if stalled else poll_since)
            poll_since = since
            if active > counted or stalled:
                counted, last_progress = active, time.perf_counter()
            if active >= args.servers:
                break
            if time.perf_counter() - start > args.timeout:
                raise SystemExit(f"only {active}/{args.servers} ACTIVE after {args.timeout} s")
            if await count_status(cloud, client, headers, "ERROR"):
                raise SystemExit("servers went to ERROR; logs in " + str(cloud.state))
            await asyncio.sleep(0.25)
        done = time.perf_counter()
        cpu_used = process_cpu_seconds(pids) - cpu_before
        by_service = {name: round((process_cpu_seconds(group) - by_service_before[name]) / args.servers * 1000, 1)
                      for name, group in cloud.pids_by_service().items()}
        by_server = {name: round((process_cpu_seconds(group) - servers_before[name]) / args.servers * 1000, 1)
                     for name, group in servers.items()}
        r = await client.get(cloud.url("COMPUTE") + "/v2.1/servers/detail", headers=headers,
                             params={"status": "ERROR"})
        errors = len(r.json()["servers"])
        streamed = stop_stream_clients(streams) if streams else {}
        return {"servers": args.servers, "hosts": args.hosts, "errors": errors, **streamed,
                "create_phase_s": round(created - start, 2), "total_s": round(done - start, 2),
                "servers_per_s": round(args.servers / (done - start), 1),
                "cloud_cpu_ms_per_server": round(cpu_used / args.servers * 1000, 1),
                "cpu_ms_per_server_by_service": by_service,
                # Beside Nefos's own, not in it: the broker's figure includes anything else it serves.
                "servers_cpu_ms_per_server": by_server,
                "create_p50_ms": round(percentile(latencies, 50) * 1000, 1),
                "create_p99_ms": round(percentile(latencies, 99) * 1000, 1)}


def start_stream_clients(cloud: Cloud, token: str, count: int) -> subprocess.Popen:
    """``count`` stream clients in a process of their own (the bench's loop stays the creates'),
    returned once every one of them is connected."""
    proc = subprocess.Popen([sys.executable, __file__, "--stream-worker", cloud.url("COMPUTE"), token, str(count)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != f"connected {count}":
        raise SystemExit(f"the stream clients did not connect: {line!r}")
    return proc


def stop_stream_clients(proc: subprocess.Popen) -> dict:
    # The clients' own CPU: on a machine of two cores it is taken from the cloud's.
    cpu = process_cpu_seconds([proc.pid])
    proc.send_signal(signal.SIGTERM)
    counts = json.loads(proc.stdout.readline())
    proc.wait(timeout=30)
    return {"stream_clients": len(counts["received"]), "stream_events_per_client": counts["received"],
            "stream_clients_cpu_s": round(cpu, 2),
            "stream_ids_missing_per_client": counts["missing"], "stream_in_order": counts["in_order"]}


def stream_worker(compute_url: str, token: str, count: int) -> None:
    from nefos.cmd.event_tail import read_stream
    received = [0] * count
    ids: list[list[int]] = [[] for _ in range(count)]

    async def follow(i: int, connected: asyncio.Event, client: httpx.AsyncClient) -> None:
        async for message in read_stream(client, compute_url + "/v2.1/nefos-events",
                                         headers={"X-Auth-Token": token}):
            if message["event"] == "stream.connected":
                connected.set()
            else:
                received[i] += 1
                ids[i].append(int(message["id"]))

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with httpx.AsyncClient(verify=verified_tls(), limits=httpx.Limits(max_connections=count + 1)) as client:
            connected = [asyncio.Event() for _ in range(count)]
            tasks = [asyncio.create_task(follow(i, connected[i], client)) for i in range(count)]
            await asyncio.gather(*(c.wait() for c in connected))
            print(f"connected {count}", flush=True)
            await stop.wait()
            # What was sent up to the last ACTIVE, read to the end: until 2 s pass without a message.
            total, quiet_since = -1, time.monotonic()
            while time.monotonic() - quiet_since < 2.0:
                if sum(received) != total:
                    total, quiet_since = sum(received), time.monotonic()
                await asyncio.sleep(0.1)
            for task in tasks:
                task.cancel()
        # Each client's ids should be every id between its first and last (SQLite leaves no gaps).
        print(json.dumps({"received": received,
                          "missing": [(max(i) - min(i) + 1 - len(set(i))) if i else 0 for i in ids],
                          "in_order": all(i == sorted(i) for i in ids)}), flush=True)
    asyncio.run(run())


async def list_10k(args, cloud: Cloud) -> dict:
    """Fill the database up to 10 000 servers, then time the detailed list of 1000."""
    from sqlalchemy import func, insert, select

    from nefos.db.models import Instance
    from nefos.db.session import Database
    db = Database(cloud.db_url)
    async with httpx.AsyncClient(verify=verified_tls(), timeout=120) as client:
        token = await admin_token(cloud, client)
        headers = {"X-Auth-Token": token}
        r = await client.get(cloud.url("COMPUTE") + "/v2.1/servers/detail", headers=headers, params={"limit": 1})
        template_id = r.json()["servers"][0]["id"]
        async with db.reader() as s:
            template = (await s.execute(select(Instance).where(Instance.uuid == template_id))).scalar_one().to_dict()
            existing = (await s.execute(select(func.count()).select_from(Instance).where(
                Instance.deleted == 0, Instance.project_id == template["project_id"]))).scalar_one()
        template.pop("id")
        rows = []
        for i in range(max(0, 10000 - existing)):
            row = dict(template, uuid=str(uuid.uuid4()), display_name=f"filler-{i}")
            rows.append(row)
        async with db.transaction() as s:
            for chunk in range(0, len(rows), 1000):
                await s.execute(insert(Instance), rows[chunk:chunk + 1000])
        await db.dispose()
        timings = []
        for _ in range(args.list_repeats):
            t = time.perf_counter()
            r = await client.get(cloud.url("COMPUTE") + "/v2.1/servers/detail", headers=headers,
                                 params={"limit": 1000})
            timings.append(time.perf_counter() - t)
            assert r.status_code == 200 and len(r.json()["servers"]) == 1000, r.text[:300]
        return {"servers_in_db": 10000, "list_detail_1000_p50_ms": round(percentile(timings, 50) * 1000, 1),
                "list_detail_1000_min_ms": round(min(timings) * 1000, 1),
                "list_detail_1000_each_ms": [round(t * 1000, 1) for t in timings]}


def main() -> None:
    if sys.argv[1:2] == ["--stream-worker"]:
        stream_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["all-in-one", "multi-process"], default="all-in-one")
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--list-repeats", type=int, default=5)
    parser.add_argument("--skip-list", action="store_true")
    parser.add_argument("--stream-clients", type=int, default=0, metavar="N",
                        help="N clients follow the event stream during the boot (another process)")
    parser.add_argument("--profile", metavar="FILE",
                        help="run the cloud under cProfile, stats written to FILE (multi-process: "
                             "FILE.<service> for each process)")
    parser.add_argument("--profile-clock", choices=["cpu", "wall"], default="cpu",
                        help="what --profile times: each process's CPU (default) or the wall clock")
    args = parser.parse_args()
    # The machine's speed before the cloud starts (then it is the cloud's own load).
    result = {"date": dt.datetime.now().isoformat(timespec="seconds"), "mode": args.mode,
              "machine": f"{platform.node()} {os.cpu_count()} cores {platform.machine()}",
              "concurrency": args.concurrency, "load_before": os.getloadavg()[0],
              "reference_timeit_ms": reference_timeit()}
    cloud = Cloud(args)
    cloud.start()
    try:
        result.update(asyncio.run(boot(args, cloud)))
        if not args.skip_list:
            result.update(asyncio.run(list_10k(args, cloud)))
        result["load_after"] = os.getloadavg()[0]
        result["reference_timeit_ms_after"] = reference_timeit()
        print(json.dumps(result, indent=2))
    finally:
        cloud.stop()


if __name__ == "__main__":
    main()
