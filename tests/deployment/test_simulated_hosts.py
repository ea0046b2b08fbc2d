"""Fifty simulated compute hosts (``nefos simulate-hosts``, two processes) under a multi-process
control plane with two schedulers and two conductors, on PostgreSQL and RabbitMQ, with the shipped
pool sizes: a few hundred servers booted at once all go ACTIVE, no host is overcommitted though
the schedulers claim side by side (hosts are filled to nine tenths), every host keeps
heartbeating, and the cloud's database connections stay within the deployment's budget
(``nefos.db.connection_budget``) throughout. PostgreSQL is a server of the test's own with
PostgreSQL's default max_connections (100), so the budget is checked against the real limit and
the machine's shared server is not crowded."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import asyncpg
import pytest

from nefos.config import Config
from nefos.db.connection_budget import deployment_budget
from nefos.http_client import verified_tls
from tests.database_servers import OwnPostgres
from tests.deployment.test_multiprocess import running_cloud

HOSTS = 50
VCPUS_PER_HOST = 4  # with cpu_allocation_ratio 1: 200 m1.nano servers fill every host
SERVERS = 180
CONTROL_PLANE = [["identity"], ["image"], ["network"], ["scheduler", "--host", "sched-1"],
                 ["scheduler", "--host", "sched-2"], ["conductor", "--host", "cond-1"],
                 ["conductor", "--host", "cond-2"], ["api"]]
HOST_PROCESSES = [["simulate-hosts", "--count", "25", "--first", "1", "--host-prefix", "sim"],
                  ["simulate-hosts", "--count", "25", "--first", "26", "--host-prefix", "sim"]]

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


class BackendSampler(threading.Thread):
    """The most connections to ``database`` seen in pg_stat_activity, sampled every 0.2 s."""

    def __init__(self, url: str, database: str):
        super().__init__(daemon=True)
        self.url, self.database, self.most, self.samples = url, database, 0, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        asyncio.run(self._sample())

    async def _sample(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            while not self.stopping.is_set():
                count = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                    self.database)
                self.most, self.samples = max(self.most, count), self.samples + 1
                await asyncio.sleep(0.2)
        finally:
            await conn.close()


def _wait_hypervisors(compute, procs, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        r = compute.get("/v2.1/os-hypervisors/statistics")
        if r.status_code == 200 and r.json()["hypervisor_statistics"]["count"] >= count:
            return
        assert time.monotonic() < deadline, f"hosts did not all report:\n{procs.logs()}"
        time.sleep(0.5)


@pytest.fixture
def own_postgres():
    server = OwnPostgres(max_connections=100)
    server.start()
    try:
        yield server
    finally:
        server.destroy()


def test_simulated_hosts_boot_wave_within_budget(tmp_path, own_postgres):
    settings = {"fake_vcpus": str(VCPUS_PER_HOST), "cpu_allocation_ratio": "1.0",
                "quota_instances": "-1", "quota_cores": "-1", "quota_ram": "-1", "quota_ports": "-1"}
    with running_cloud("postgresql", tmp_path, CONTROL_PLANE + HOST_PROCESSES, hypervisors=None,
                       database_url=own_postgres.create_database("nefos"), **settings) as (compute, network, procs):
        db_url = procs.env["NEFOS_DATABASE_URL"]
        database = db_url.rsplit("/", 1)[1]
        defaults = Config()
        processes = len(CONTROL_PLANE) + len(HOST_PROCESSES)
        budget = deployment_budget(100, processes)
        # The shipped defaults are within the budget this deployment's formula gives.
        assert defaults.max_pool_size <= budget["max_pool_size"] and defaults.max_overflow == 0
        allowed = processes * (defaults.max_pool_size + defaults.max_overflow)
        _wait_hypervisors(compute, procs, HOSTS)
        r = network.post("/v2.0/networks", json={"network": {"name": "sim-net"}})
        net_id = r.json()["network"]["id"]
        r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.20.0.0/22",
                                                           "ip_version": 4}})
        assert r.status_code == 201, r.text
        sampler = BackendSampler(db_url.replace("/" + database, "/postgres"), database)
        sampler.start()
        try:
            ids = asyncio.run(_create_all(procs, net_id))
            _wait_all_active(compute, procs, ids)
        finally:
            sampler.stopping.set()
            sampler.join(10)
        assert sampler.samples > 10
        assert 0 < sampler.most <= allowed, f"{sampler.most} connections > budget {allowed}"
        asyncio.run(_check_invariants(db_url, ids))
        procs.check_alive()


async def _create_all(procs, net_id: str) -> list[str]:
    import httpx
    from tests.noauth import ADMIN
    port = procs.env["NEFOS_COMPUTE_API_PORT"]
    sem = asyncio.Semaphore(30)
    async with httpx.AsyncClient(verify=verified_tls(),
                                 base_url=f"http://127.0.0.1:{port}", headers=ADMIN, timeout=120) as client:
        async def create(i: int) -> str:
            async with sem:
                r = await client.post("/v2.1/servers", json={"server": {
                    "name": f"sim-{i}", "imageRef": _image_id(), "flavorRef": "42",
                    "networks": [{"uuid": net_id}]}})
                assert r.status_code == 202, r.text
                return r.json()["server"]["id"]
        return await asyncio.gather(*(create(i) for i in range(SERVERS)))


def _image_id() -> str:
    from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
    return DEFAULT_IMAGE_ID


def _wait_all_active(compute, procs, ids: list[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    wanted = set(ids)
    while True:
        procs.check_alive()
        servers = []
        params = {"limit": 1000}
        while True:
            page = compute.get("/v2.1/servers/detail", params=params).json()["servers"]
            servers += page
            if len(page) < 1000:
                break
            params["marker"] = page[-1]["id"]
        mine = [s for s in servers if s["id"] in wanted]
        errors = [s for s in mine if s["status"] == "ERROR"]
        assert not errors, errors[0].get("fault")
        if len(mine) == len(wanted) and all(s["status"] == "ACTIVE" and s["OS-EXT-STS:task_state"] is None
                                            for s in mine):
            return
        assert time.monotonic() < deadline, \
            f"{sum(s['status'] == 'ACTIVE' for s in mine)}/{len(ids)} ACTIVE:\n{procs.logs()}"
        time.sleep(1)


async def _check_invariants(db_url: str, ids: list[str]) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        nodes = await conn.fetch(
            "SELECT n.host, n.vcpus, n.vcpus_used, n.cpu_allocation_ratio, n.memory_mb_used,"
            " (SELECT coalesce(sum(a.vcpus), 0) FROM allocations a WHERE a.compute_node_id = n.id) AS allocated"
            " FROM compute_nodes n WHERE n.deleted = 0")
        services = await conn.fetch(
            "SELECT host, report_count, last_seen_up, now() AT TIME ZONE 'utc' - last_seen_up AS age"
            " FROM services WHERE \"binary\" = 'nova-compute' AND deleted = 0")
        hosts = dict(await conn.fetch(
            "SELECT host, count(*) FROM instances WHERE deleted = 0 AND uuid = ANY($1::text[]) GROUP BY host",
            [str(uuid.UUID(i)) for i in ids]))
    finally:
        await conn.close()
    assert len(nodes) == HOSTS and len(services) == HOSTS
    for node in nodes:
        assert node["vcpus_used"] <= node["vcpus"] * node["cpu_allocation_ratio"], dict(node)
        assert node["vcpus_used"] == node["allocated"], dict(node)
        assert hosts.get(node["host"], 0) <= VCPUS_PER_HOST, (node["host"], hosts.get(node["host"]))
    assert sum(hosts.values()) == SERVERS
    # Heartbeats keep every host up: each beat at least once and recently (service_down_time 60 s).
    for service in services:
        assert service["report_count"] >= 1 and service["age"].total_seconds() < 60, dict(service)
