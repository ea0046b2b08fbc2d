"""Chaos run: mixed operations from concurrent clients while services are killed and restarted, then
invariants.

Every service in its own process (image, network, scheduler, conductor, the Compute API, four fake
compute hosts) over a RabbitMQ node and a PostgreSQL (``--database mariadb``: MariaDB) server this
run starts for itself, on their own ports and data directories (restarting them disturbs nothing
else on the machine). Clients, each in its own project with its own network, create (half of them
on a port made first), delete, stop, start, reboot, resize and confirm, snapshot and delete
mid-build; meanwhile a random service process is SIGKILLed and restarted every ``--kill-every``
seconds, RabbitMQ is restarted once and the database once; a process that exits by itself (one
started while the broker is down does) is started again within a second, as systemd's
``Restart=on-failure`` would. A request refused at connection (its
service restarting) is sent again; one whose answer was lost counts as unknown. Then, within
``--settle`` seconds, every server must be steady (ACTIVE, SHUTOFF, ERROR with a fault, or gone,
no task state), every build request taken and every accepted action on a live server finished
(what a killed process left is finished by the conductor's later passes), and:

* quota usage = what the servers hold; hypervisor usage = the allocations; no allocation without
  a server or an unfinished resize; no compute port without a server; no address given twice; no
  fake guest without a server, none on another host than its server's;
* every accepted create left a server (or a later delete removed it), every accepted delete
  removed its server, every accepted action on a server finished;
* no answer was a 5xx other than 503 (the service could not do it now; nothing was done).

Prints the counts, the faults injected, the recovery time and each violation; exits 1 on any.

  python bench/chaos.py --operations 1000 --clients 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nefos.cmd.allinone import free_port  # noqa: E402
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID as IMAGE  # noqa: E402
from nefos.http_client import verified_tls
from tests.database_servers import OwnMariaDB, OwnPostgres  # noqa: E402

BIN = Path(sys.executable).parent
HOSTS = [f"chaos-compute-{i}" for i in range(1, 5)]
SERVICES = {"image": ["image"], "network": ["network"], "scheduler": ["scheduler"], "conductor": ["conductor"],
            **{h: ["compute", "--host", h] for h in HOSTS}, "api": ["api"]}
STEADY = {"ACTIVE", "SHUTOFF", "ERROR", "VERIFY_RESIZE", "PAUSED", "SUSPENDED", "SHELVED", "SHELVED_OFFLOADED"}


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


class Rabbit:
    """A RabbitMQ node of this run's own."""

    def __init__(self, root: Path):
        self.dir = root / "rabbit"
        self.dir.mkdir()
        shutil.chown(self.dir, "rabbitmq", "rabbitmq")
        self.port, self.dist = free_port(), free_port()
        self.node = f"chaos{uuid.uuid4().hex[:6]}@localhost"
        plugins = self.dir / "enabled_plugins"
        plugins.write_text("[].\n")
        config = self.dir / "rabbitmq.conf"  # the machine's own config would take its port
        config.write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        self.env = dict(os.environ, RABBITMQ_NODENAME=self.node, RABBITMQ_NODE_PORT=str(self.port),
                        RABBITMQ_DIST_PORT=str(self.dist), RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
                        RABBITMQ_LOG_BASE=str(self.dir / "log"), RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
                        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_CONFIG_FILE=str(config),
                        HOME="/var/lib/rabbitmq")  # rabbitmqctl finds the node's Erlang cookie there
        self.proc: subprocess.Popen | None = None
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self) -> None:
        self.proc = subprocess.Popen(["rabbitmq-server"], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while subprocess.run(["rabbitmqctl", "-n", self.node, "await_startup", "--timeout", "30"], env=self.env,
                             capture_output=True, timeout=60).returncode != 0:  # 69 until the VM is up
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ node {self.node} did not start: see {self.dir / 'log'}")
            time.sleep(1)

    def stop(self) -> None:
        subprocess.run(["rabbitmqctl", "-n", self.node, "stop"], env=self.env, capture_output=True, timeout=120)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()


class Services:
    """The service processes, each restarted when it exits by itself (``restart_exited``, every
    second, as systemd's ``Restart=on-failure`` would: a service started while the broker is down
    exits)."""

    def __init__(self, root: Path, env: dict):
        self.root, self.env = root, env
        self.procs: dict[str, subprocess.Popen] = {}
        self.kills = Counter()
        self.exits = Counter()  # exits of their own, by service
        self.lock = threading.Lock()  # a kill and its restart, or a restart, one at a time
        self.stopping = False

    def start(self, name: str) -> None:
        env = dict(self.env)
        if name in HOSTS:
            env["NEFOS_COMPUTE_ID_PATH"] = str(self.root / f"compute_id.{name}")
        log = open(self.root / f"{name}.log", "a")
        self.procs[name] = subprocess.Popen([str(BIN / "nefos"), *SERVICES[name], "--state-dir", str(self.root)],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)

    def kill_and_restart(self, name: str) -> None:
        with self.lock:
            self.procs[name].send_signal(signal.SIGKILL)
            self.procs[name].wait()
            self.kills[name] += 1
            self.start(name)

    def restart_exited(self) -> None:
        with self.lock:
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None and not self.stopping:
                    self.exits[f"{name} (status {proc.returncode})"] += 1
                    self.start(name)

    async def supervise(self) -> None:
        while not self.stopping:
            await asyncio.to_thread(self.restart_exited)
            await asyncio.sleep(1)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Client:
    """One tenant: its own project and network, its servers, what the cloud answered it."""

    def __init__(self, api: str, network_api: str, index: int, rng: random.Random):
        self.project = f"{index:04d}" + uuid.uuid4().hex[4:]
        headers = {"X-Project-Id": self.project, "X-User-Id": uuid.uuid4().hex, "X-Roles": "member,reader"}
        # Longer than any wait of the cloud's own (rpc_response_timeout, 60 s): an answer is seen, not lost.
        self.http = httpx.AsyncClient(verify=verified_tls(), base_url=api, headers=dict(headers, **{
            "OpenStack-API-Version": "compute 2.37"}), timeout=180)
        self.network_http = httpx.AsyncClient(verify=verified_tls(), base_url=network_api, headers=headers, timeout=180)
        self.rng = rng
        self.network_id = ""
        self.servers: set[str] = set()
        self.created: set[str] = set()  # accepted creates
        self.deleted: set[str] = set()  # accepted deletes
        self.maybe_deleted: set[str] = set()  # deletes answered 503 or whose answer was lost
        self.answers = Counter()
        self.accepted_requests: set[str] = set()  # request ids of accepted actions and deletes

    async def setup(self) -> None:
        r = await self.network_http.post("/v2.0/networks", json={"network": {"name": "chaos"}})
        r.raise_for_status()
        self.network_id = r.json()["network"]["id"]
        r = await self.network_http.post("/v2.0/subnets", json={"subnet": {
            "network_id": self.network_id, "ip_version": 4, "cidr": "10.9.0.0/24"}})
        r.raise_for_status()

    async def _send(self, http: httpx.AsyncClient, method: str, url: str, **kwargs) -> httpx.Response:
        """The request, sent again while its service is not listening (killed and restarting): a
        refused connection never reached it. A request that reached it is never sent twice."""
        deadline = time.monotonic() + 120
        while True:
            try:
                return await http.request(method, url, **kwargs)
            except httpx.ConnectError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _networks(self) -> list[dict]:
        """Half the servers on a port made first (a port of the user's own), half on the network."""
        if self.rng.random() < 0.5:
            return [{"uuid": self.network_id}]
        r = await self._send(self.network_http, "POST", "/v2.0/ports", json={"port": {"network_id": self.network_id}})
        self.answers[("create port", r.status_code)] += 1
        return [{"port": r.json()["port"]["id"]}] if r.status_code == 201 else [{"uuid": self.network_id}]

    async def step(self) -> None:
        op = self.rng.choice(["create", "create", "delete", "stop", "start", "reboot", "resize", "confirm",
                              "snapshot", "delete-mid-build"])
        try:
            if op in ("create", "delete-mid-build") or not self.servers:
                op = "create" if op != "delete-mid-build" else op
                r = await self._send(self.http, "POST", "/v2.1/servers", json={"server": {
                    "name": f"chaos-{uuid.uuid4().hex[:6]}", "imageRef": IMAGE, "flavorRef": "1",
                    "networks": await self._networks()}})
                self.answers[("create", r.status_code)] += 1
                if r.status_code == 202:
                    sid = r.json()["server"]["id"]
                    self.created.add(sid)
                    self.servers.add(sid)
                    if op == "delete-mid-build":
                        await self._delete(sid)
                return
            sid = self.rng.choice(sorted(self.servers))
            if op == "delete":
                await self._delete(sid)
                return
            body = {"stop": {"os-stop": None}, "start": {"os-start": None},
                    "reboot": {"reboot": {"type": self.rng.choice(["SOFT", "HARD"])}},
                    "resize": {"resize": {"flavorRef": self.rng.choice(["1", "2"])}},
                    "confirm": {"confirmResize": None}, "snapshot": {"createImage": {"name": "chaos"}}}[op]
            r = await self._send(self.http, "POST", f"/v2.1/servers/{sid}/action", json=body)
            self.answers[(op, r.status_code)] += 1
            if r.is_success:
                self.accepted_requests.add(r.headers.get("x-openstack-request-id", ""))
        except httpx.HTTPError as exc:  # the answer was lost (the API killed while it worked)
            self.answers[(op, type(exc).__name__)] += 1

    async def _delete(self, sid: str) -> None:
        try:
            r = await self._send(self.http, "DELETE", f"/v2.1/servers/{sid}")
        except httpx.HTTPError:
            self.maybe_deleted.add(sid)
            raise
        self.answers[("delete", r.status_code)] += 1
        if r.is_success:
            self.accepted_requests.add(r.headers.get("x-openstack-request-id", ""))
        if r.status_code == 204:
            self.deleted.add(sid)
            self.servers.discard(sid)
        elif r.status_code >= 500:
            self.maybe_deleted.add(sid)

    async def close(self) -> None:
        await self.http.aclose()
        await self.network_http.aclose()


async def wait_api(api: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(verify=verified_tls(), base_url=api, timeout=5, headers={
            "X-Project-Id": "a" * 32, "X-User-Id": "b" * 32, "X-Roles": "admin,member,reader"}) as c:
        while True:
            try:
                r = await c.get("/v2.1/os-hypervisors")
                if r.status_code == 200 and len(r.json()["hypervisors"]) == len(HOSTS):
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cloud did not come up")
            await asyncio.sleep(0.5)


async def unfinished_work(db_url: str, accepted: set[str]) -> list[str] | None:
    """What the cloud still owes once every server is steady: build requests no conductor finished
    (a server deleted before it was scheduled leaves its request to the next pass over them), and
    accepted actions on live servers not finished yet (an action a killed host never finished is
    finished by a conductor's later pass). None: the database did not answer."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from nefos.db.session import normalise_url
    engine = create_async_engine(normalise_url(db_url))
    try:
        async with engine.connect() as conn:
            outbox = (await conn.execute(text("SELECT count(*) FROM build_requests"))).scalar_one()
            open_actions = (await conn.execute(text(
                "SELECT a.instance_uuid, a.action, a.request_id FROM instance_actions a JOIN instances i "
                "ON i.uuid = a.instance_uuid WHERE a.finish_time IS NULL AND a.action <> 'create' "
                "AND i.deleted = 0"))).all()
    except Exception:
        return None
    finally:
        await engine.dispose()
    owed = [f"{outbox} build request(s) not taken"] if outbox else []
    return owed + [f"{instance} action {action} not finished" for instance, action, request_id in open_actions
                   if request_id in accepted]


async def settle(api: str, db_url: str, clients: list[Client], timeout: float) -> tuple[float, list[str]]:
    """Seconds until every server is steady and nothing is owed (``unfinished_work``), and what is
    not when the time is up."""
    accepted = set().union(*(c.accepted_requests for c in clients))
    started = time.monotonic()
    admin = httpx.AsyncClient(verify=verified_tls(), base_url=api, timeout=30, headers={
        "X-Project-Id": "a" * 32, "X-User-Id": "b" * 32, "X-Roles": "admin,member,reader"})
    try:
        while True:
            unsteady = []
            try:
                r = await admin.get("/v2.1/servers/detail", params={"all_tenants": "1", "limit": "1000"})
                servers = r.json()["servers"] if r.status_code == 200 else None
            except httpx.HTTPError:
                servers = None
            if servers is not None:
                for s in servers:
                    if s["status"] not in STEADY or s.get("OS-EXT-STS:task_state"):
                        unsteady.append(f"{s['id']} {s['status']}/{s.get('OS-EXT-STS:task_state')}")
                    elif s["status"] == "ERROR" and not s.get("fault"):
                        unsteady.append(f"{s['id']} ERROR without a fault")
                if not unsteady:
                    owed = await unfinished_work(db_url, accepted)
                    if owed == []:
                        return time.monotonic() - started, []
                    unsteady += owed if owed is not None else ["the database did not answer"]
            if time.monotonic() - started > timeout:
                return time.monotonic() - started, unsteady or ["the server list never answered"]
            await asyncio.sleep(1)
    finally:
        await admin.aclose()


async def check_invariants(db_url: str, clients: list[Client], fake_dir: Path) -> list[str]:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from nefos.db.session import normalise_url
    engine = create_async_engine(normalise_url(db_url))
    problems: list[str] = []
    async with engine.connect() as conn:
        live = {r.uuid: r for r in (await conn.execute(text(
            "SELECT uuid, project_id, vcpus, memory_mb, host, system_metadata FROM instances "
            "WHERE deleted = 0"))).all()}
        # A migration is recorded on its server. A resize in progress (VERIFY_RESIZE included) holds
        # the quota of the bigger flavor until it is confirmed or reverted, and its source host still
        # has the old guest; its destination claim's consumer is the migration's uuid.
        recorded = {}  # server uuid: its migration
        for inst in live.values():
            sysmeta = (json.loads(inst.system_metadata) if isinstance(inst.system_metadata, str)
                       else inst.system_metadata) or {}
            if sysmeta.get("nefos_migration"):
                recorded[inst.uuid] = sysmeta["nefos_migration"]
        moving = {uuid: m for uuid, m in recorded.items() if m.get("status") not in ("confirmed", "reverted", "error")}
        real = Counter()
        for inst in live.values():
            held = (moving.get(inst.uuid) or {}).get("quota") or {}
            real[(inst.project_id, "instances")] += 1
            real[(inst.project_id, "cores")] += max(inst.vcpus, held.get("cores", 0))
            real[(inst.project_id, "ram")] += max(inst.memory_mb, held.get("ram", 0))
        usage = {(r.project_id, r.resource): r.in_use for r in (await conn.execute(text(
            "SELECT project_id, resource, in_use FROM quota_usages "
            "WHERE resource IN ('instances', 'cores', 'ram')"))).all()}
        for key in set(real) | set(usage):
            if usage.get(key, 0) != real.get(key, 0):
                problems.append(f"quota {key}: usage {usage.get(key, 0)}, servers hold {real.get(key, 0)}")
        nodes = (await conn.execute(text(
            "SELECT n.id, n.host, n.vcpus_used, n.memory_mb_used, n.running_vms, "
            "coalesce(sum(a.vcpus), 0) AS v, coalesce(sum(a.memory_mb), 0) AS m, count(a.id) AS c "
            "FROM compute_nodes n LEFT JOIN allocations a ON a.compute_node_id = n.id "
            "WHERE n.deleted = 0 GROUP BY n.id, n.host, n.vcpus_used, n.memory_mb_used, n.running_vms"))).all()
        for n in nodes:
            if (n.vcpus_used, n.memory_mb_used, n.running_vms) != (n.v, n.m, n.c):
                problems.append(f"host {n.host}: usage {(n.vcpus_used, n.memory_mb_used, n.running_vms)}, "
                                f"allocations {(n.v, n.m, n.c)}")
        migrations = {m["uuid"]: (uuid, m.get("status")) for uuid, m in recorded.items()}
        for (consumer,) in (await conn.execute(text("SELECT consumer_uuid FROM allocations"))).all():
            if consumer in migrations:
                instance, status = migrations[consumer]
                if status in ("confirmed", "reverted", "error"):
                    problems.append(f"allocation of migration {consumer} ({status}) of {instance}, "
                                    "which no longer needs it")
            elif consumer not in live:
                problems.append(f"allocation of {consumer}, no such server")
        for (address, count) in (await conn.execute(text(
                "SELECT ip_address, count(*) FROM ipallocations a JOIN ports p ON p.id = a.port_id "
                "GROUP BY a.subnet_id, ip_address HAVING count(*) > 1"))).all():
            problems.append(f"address {address} given {count} times on one subnet")
        accepted = set().union(*(c.accepted_requests for c in clients))
        for (instance, action, request_id) in (await conn.execute(text(
                "SELECT instance_uuid, action, request_id FROM instance_actions WHERE finish_time IS NULL "
                "AND action <> 'create'"))).all():  # a create ends in its server's state (as Nova)
            if instance in live and request_id in accepted:
                problems.append(f"server {instance}: action {action} accepted, never finished")
        for (port, device) in (await conn.execute(text(
                "SELECT id, device_id FROM ports WHERE device_owner LIKE 'compute:%'"))).all():
            if device not in live:
                problems.append(f"port {port} of {device}, no such server")
        # Every state change wrote its event stream entry in its own transaction: the last entry of each
        # server tells the state its row has (nothing changed a state without telling it).
        told = {}
        for (server, kind, data) in (await conn.execute(text(
                "SELECT server_id, type, data FROM stream_events WHERE type IN "
                "('server.created', 'server.updated', 'server.deleted') ORDER BY id"))).all():
            told[server] = (kind, json.loads(data) if isinstance(data, str) else data)
        for row in (await conn.execute(text(
                "SELECT uuid, vm_state, task_state, power_state, deleted FROM instances"))).all():
            kind, data = told.get(row.uuid, (None, {}))
            if kind is None:
                problems.append(f"server {row.uuid}: no event ever told of it")
            elif (kind == "server.deleted") != bool(row.deleted) or (
                    (data.get("vm_state"), data.get("task_state"), data.get("power_state"))
                    != (row.vm_state, row.task_state, row.power_state)):
                problems.append(f"server {row.uuid}: its last event ({kind} {data}) is not its state "
                                f"({row.vm_state}, {row.task_state}, {row.power_state}, deleted {row.deleted})")
        outbox = (await conn.execute(text("SELECT count(*) FROM build_requests"))).scalar_one()
        if outbox:
            problems.append(f"{outbox} build request(s) never taken")
    await engine.dispose()
    for host in HOSTS:
        path = fake_dir / f"{host}.json"
        saved = json.loads(path.read_text()) if path.exists() else {}
        for guest in (g["uuid"] for g in saved.get("guests", [])):
            if guest not in live:
                problems.append(f"guest {guest} on {host}, no such server")
            elif live[guest].host != host and (moving.get(guest) or {}).get("source_compute") != host:
                problems.append(f"guest {guest} on {host}, its server is on {live[guest].host}")
    for c in clients:
        for sid in c.created - c.deleted - c.maybe_deleted:
            if sid not in live:
                problems.append(f"server {sid}: create accepted, never deleted, but gone")
        for sid in c.deleted:
            if sid in live:
                problems.append(f"server {sid}: delete accepted, still there")
    return problems


IDLE_WAITS = ("asyncio/tasks.py", "run_forever", "aiormq/", "uvicorn/", "asyncio/queues.py", "nefos/cmd/cli.py:",
              "robust_connection.py", "nefos/cmd/allinone.py:")


def ask_for_task_reports(services: Services, timeout: float = 10.0) -> None:
    """Each live service writes what its tasks wait on into its log (SIGUSR2, nefos.task_report)."""
    asked = {}
    for name, proc in services.procs.items():
        if proc.poll() is None:
            log = services.root / f"{name}.log"
            asked[name] = log.read_text(errors="replace").count("==== end of task report")
            proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while asked and time.monotonic() < deadline:
        asked = {n: c for n, c in asked.items()
                 if (services.root / f"{n}.log").read_text(errors="replace").count("==== end of task report") <= c}
        time.sleep(0.1)


def print_task_reports(root: Path, budget: int = 4000) -> None:
    """The busy tasks of each service's last report (a task waiting in a periodic sleep, the bus's
    or the HTTP server's own loops, is left out), within ``budget`` characters."""
    for log in sorted(root.glob("*.log")):
        text = log.read_text(errors="replace")
        start = text.rfind("==== task report of pid")
        if start < 0:
            print(f"--- {log.stem}: no task report (not running?)", file=sys.stderr)
            continue
        report = text[start:text.find("==== threads ====", start)].splitlines()
        busy = [line[len("--- task "):][:200] for line in report if line.startswith("--- task ")
                and not any(idle in line for idle in IDLE_WAITS)]
        print(f"--- {log.stem}: {report[0].split(': ')[-1].strip(' =')}, busy: {'; '.join(busy[:8]) or 'none'}"[:budget // 9],
              file=sys.stderr)


def print_traces(root: Path, unsteady: list[str], lines_per_server: int = 6) -> None:
    """What the services' logs say about each server left unsteady (to stderr: a CI run keeps
    only what it prints), and each service's last error."""
    logs = {p.stem: p.read_text(errors="replace").splitlines() for p in sorted(root.glob("*.log"))}
    for entry in unsteady[:8]:
        uuid_ = entry.split()[0]
        if len(uuid_) != 36:
            continue
        hits = [f"{name}: {line[:220]}" for name, lines in logs.items() for line in lines if uuid_ in line]
        print(f"--- {entry}: {len(hits)} log line(s), the last {lines_per_server}:", file=sys.stderr)
        for hit in sorted(hits, key=lambda h: h.split(": ", 1)[1])[-lines_per_server:]:
            print("   ", hit, file=sys.stderr)
    for name, lines in logs.items():
        errors = [line for line in lines if " ERROR " in line and "error when creating transport" not in line]
        if errors:
            print(f"--- {name}: {len(errors)} ERROR line(s), the last: {errors[-1][:300]}", file=sys.stderr)


async def main(args) -> int:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="nefos-chaos-"))
    os.chmod(root, 0o755)
    database_name = {"postgresql": "PostgreSQL", "mariadb": "MariaDB"}[args.database]
    pg = (OwnPostgres if args.database == "postgresql" else OwnMariaDB)(root)
    rabbit = Rabbit(root)
    try:
        pg.start()
        database_url = pg.create_database("nefos")
        rabbit.start()
    except BaseException:
        rabbit.stop()
        pg.stop()
        raise
    ports = {name: free_port() for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
    env = dict(os.environ, NEFOS_DATABASE_URL=database_url, NEFOS_BUS_URL=rabbit.url, NEFOS_AUTH_STRATEGY="noauth",
               NEFOS_FAKE_HYPERVISOR_DIR=str(root / "hypervisors"), NEFOS_REPORT_INTERVAL="2",
               NEFOS_HOST=f"chaos-{uuid.uuid4().hex[:6]}")
    env.update({f"NEFOS_{name}_API_PORT": str(port) for name, port in ports.items()})
    run(str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(root), env=env, timeout=120)
    services = Services(root, env)
    api = f"http://127.0.0.1:{ports['COMPUTE']}"
    network_api = f"http://127.0.0.1:{ports['NETWORK']}"
    faults = Counter()
    violations: list[str] = []
    try:
        for name in SERVICES:
            services.start(name)
        services.supervisor = asyncio.create_task(services.supervise())
        await wait_api(api)
        clients = [Client(api, network_api, i, random.Random(rng.random())) for i in range(args.clients)]
        for client in clients:
            await client.setup()
        remaining = [args.operations]
        done = asyncio.Event()

        async def worker(client: Client) -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                await client.step()
            done.set()

        async def chaos() -> None:
            started = time.monotonic()
            restarted = set()
            while not done.is_set():
                await asyncio.sleep(args.kill_every)
                name = rng.choice(sorted(SERVICES))
                await asyncio.to_thread(services.kill_and_restart, name)
                faults[f"SIGKILL {name}"] += 1
                left = remaining[0] / max(args.operations, 1)
                if "rabbitmq" not in restarted and left < 0.66:
                    restarted.add("rabbitmq")
                    await asyncio.to_thread(rabbit.restart)
                    faults["restart RabbitMQ"] += 1
                if "database" not in restarted and left < 0.33:
                    restarted.add("database")
                    await asyncio.to_thread(pg.restart)
                    faults[f"restart {database_name}"] += 1
            faults["seconds of chaos"] = round(time.monotonic() - started)

        t0 = time.monotonic()
        chaos_task = asyncio.create_task(chaos())
        await asyncio.gather(*(worker(c) for c in clients))
        done.set()
        await chaos_task
        ops_seconds = time.monotonic() - t0
        recovery, unsteady = await settle(api, database_url, clients, args.settle)
        violations += [f"not steady after {args.settle:g} s: {u}" for u in unsteady[:50]]
        if not unsteady:
            violations += await check_invariants(database_url, clients, root / "hypervisors")
        answers = Counter()
        for c in clients:
            answers.update(c.answers)
            await c.close()
        violations += [f"{n} answer(s) {code} to {op}: a failure must be a 4xx or a 503" for (op, code), n
                       in sorted(answers.items(), key=str) if isinstance(code, int) and code >= 500 and code != 503]
        print(f"operations: {args.operations} from {args.clients} clients in {ops_seconds:.0f} s")
        print("answers:", dict(sorted(((f"{k[0]} {k[1]}", v) for k, v in answers.items()))))
        print("faults injected:", dict(faults))
        print("exited by themselves (restarted):", dict(services.exits))
        print(f"recovery: steady {recovery:.1f} s after the last operation")
        print(f"violations: {len(violations)}")
        for v in violations:
            print("  ", v)
        if violations:
            print(f"logs kept in {root}")
            await asyncio.to_thread(ask_for_task_reports, services)
            print_task_reports(root)
            print_traces(root, unsteady)
        return 1 if violations else 0
    finally:
        services.stop()
        rabbit.stop()
        pg.stop()
        if not violations and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--operations", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between service kills")
    parser.add_argument("--settle", type=float, default=240.0, help="seconds allowed to become steady")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database", choices=["postgresql", "mariadb"], default="postgresql")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    sys.exit(asyncio.run(main(parser.parse_args())))
