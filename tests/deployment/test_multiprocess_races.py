"""Races where they can happen: several service processes on one PostgreSQL or MariaDB database
(on SQLite one process serialises every write, so these races cannot occur there).

* 100 ports created at once on one /24 through two network service processes: every one gets an
  address, no address twice, and a request that loses a few races for the lowest free address
  tries the next one rather than answering 409 "No more IP addresses available" while 150 are
  free;
* meanwhile each process holds at most max_pool_size + max_overflow connections, so a
  deployment's processes fit the database's connection limit;
* 40 creates at once through two API processes against a quota of 10;
* 50 boots through two scheduler and two conductor processes for 10 servers' capacity;
* a new project's first 20 requests at once through two network processes, each creating its
  default security group if it is not there yet.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from nefos.cmd.allinone import free_port
from nefos.config import Config
from nefos.db.session import normalise_url
from tests.backends import fresh_database
from tests.noauth import ADMIN
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.deployment.test_multiprocess import SERVER_BACKENDS, SERVICES, Processes, running_cloud
from tests.deployment.test_multiprocess import multiprocess_cloud  # noqa: F401 (a fixture)


def _wait_answering(procs: Processes, url: str, timeout: float = 60) -> None:
    """Until ``url`` answers 200 (the processes still alive)."""
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        try:
            if httpx.get(url, headers=ADMIN, timeout=5, verify=verified_tls()).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, procs.logs()
        time.sleep(0.2)


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres),
                        pytest.param("mysql", marks=pytest.mark.mysql)])
def two_network_services(request, tmp_path):
    with fresh_database(request.param) as db_url:
        env = dict(os.environ, NEFOS_DATABASE_URL=db_url, NEFOS_AUTH_STRATEGY="noauth",
                   NEFOS_HOST=f"race-{uuid.uuid4().hex[:8]}")
        subprocess.run([str(Path(sys.executable).parent / "nefos"), "db", "upgrade", "--state-dir", str(tmp_path)],
                       env=env, check=True, capture_output=True, timeout=120)
        ports = [free_port(), free_port()]
        procs = Processes(tmp_path, env)
        try:
            for i, port in enumerate(ports):
                procs.env = dict(env, NEFOS_NETWORK_API_PORT=str(port))
                procs.start(["network", "--host", f"{env['NEFOS_HOST']}-{i}"])
            urls = [f"http://127.0.0.1:{port}" for port in ports]
            for url in urls:
                _wait_answering(procs, f"{url}/v2.0/networks")
            yield urls, db_url, procs
        finally:
            procs.stop()


async def _create_ports(urls: list[str], network_id: str, count: int, db_url: str) -> tuple[list, int]:
    """The answers, and the most connections the processes held on the database meanwhile."""
    clients = [httpx.AsyncClient(verify=verified_tls(), base_url=url, headers=ADMIN, timeout=120,
                                 limits=httpx.Limits(max_connections=count)) for url in urls]
    watcher = create_async_engine(normalise_url(db_url), poolclass=NullPool)
    most = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal most
        query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                     if db_url.startswith("postgres") else
                     "SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE()")
        async with watcher.connect() as conn:
            while not done.is_set():
                most = max(most, (await conn.execute(query)).scalar_one() - 1)  # not this one
                await asyncio.sleep(0.01)
    sampling = asyncio.create_task(watch())
    try:
        answers = await asyncio.gather(*[
            clients[i % len(clients)].post("/v2.0/ports", json={"port": {"network_id": network_id}})
            for i in range(count)])
    finally:
        done.set()
        await sampling
        await watcher.dispose()
        for c in clients:
            await c.aclose()
    return answers, most


def test_100_ports_at_once_through_two_processes_all_get_an_address(two_network_services):
    urls, db_url, procs = two_network_services
    r = httpx.post(f"{urls[0]}/v2.0/networks", json={"network": {"name": "race"}}, headers=ADMIN, verify=verified_tls())
    assert r.status_code == 201, r.text
    net = r.json()["network"]["id"]
    r = httpx.post(f"{urls[0]}/v2.0/subnets", headers=ADMIN, json={"subnet": {
        "network_id": net, "cidr": "10.88.0.0/24", "ip_version": 4}}, verify=verified_tls())
    assert r.status_code == 201, r.text
    answers, most = asyncio.run(_create_ports(urls, net, 100, db_url))
    failed = [(a.status_code, a.text[:200]) for a in answers if a.status_code != 201]
    assert failed == [], f"{len(failed)} of 100 failed, first: {failed[:3]}\n{procs.logs()[-2000:]}"
    addresses = [a.json()["port"]["fixed_ips"][0]["ip_address"] for a in answers]
    assert len(set(addresses)) == 100
    # Each process within its share (unbounded, each could take up to 60, past PostgreSQL's 100 together).
    cfg = Config()
    assert 0 < most <= 2 * (cfg.max_pool_size + cfg.max_overflow), most


async def _create_servers(urls: list[str], count: int) -> list[httpx.Response]:
    headers = {**ADMIN, "OpenStack-API-Version": "compute 2.37"}
    clients = [httpx.AsyncClient(verify=verified_tls(), base_url=url, headers=headers, timeout=120,
                                 limits=httpx.Limits(max_connections=count)) for url in urls]
    try:
        return await asyncio.gather(*[clients[i % len(clients)].post("/v2.1/servers", json={"server": {
            "name": f"race-{i}", "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": "none"}})
            for i in range(count)])
    finally:
        for c in clients:
            await c.aclose()


def test_40_creates_at_once_through_two_api_processes_hold_the_quota_and_never_500(multiprocess_cloud):
    """Quota 10 instances: exactly 10 accepted, 30 refused with 403, none a 500 (PostgreSQL's
    deadlocks between the creating transactions answered 13 of 40 with 500), usage 10."""
    compute, _network, procs = multiprocess_cloud
    port = free_port()
    procs.env = dict(procs.env, NEFOS_COMPUTE_API_PORT=str(port))
    procs.start(["api", "--host", "api-2"])
    second = f"http://127.0.0.1:{port}"
    _wait_answering(procs, f"{second}/v2.1/flavors")
    answers = asyncio.run(_create_servers([str(compute.base_url).rstrip("/"), second], 40))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(202) == 10 and codes.count(403) == 30, (codes, [a.text[:200] for a in answers
                                                                     if a.status_code >= 500][:3])
    limits = compute.get("/v2.1/limits").json()["limits"]["absolute"]
    assert limits["totalInstancesUsed"] == 10, limits


def _query(db_url: str, sql: str) -> list:
    async def run() -> list:
        engine = create_async_engine(normalise_url(db_url), poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(text(sql))).all())
        finally:
            await engine.dispose()
    return asyncio.run(run())


def _steady_servers(compute: httpx.Client, count: int, procs: Processes, timeout: float = 180) -> list[dict]:
    """The project's servers once all ``count`` are ACTIVE or ERROR with no task under way."""
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        servers = compute.get("/v2.1/servers/detail").json()["servers"]
        if len(servers) == count and all(s["status"] in ("ACTIVE", "ERROR") and s["OS-EXT-STS:task_state"] is None
                                         for s in servers):
            return servers
        assert time.monotonic() < deadline, (sorted(s["status"] for s in servers), procs.logs()[-3000:])
        time.sleep(0.5)


# Each fake host has room for 5 m1.tiny servers: its disk (5 GB, allocation ratio 1) fits five 1 GB roots.
_FIVE_TINY_SERVERS = {"fake_local_gb": "5", "quota_instances": "100", "quota_cores": "100"}
_TWO_SCHEDULERS_TWO_CONDUCTORS = [
    each for args in SERVICES for each in
    ([[args[0], "--host", f"{args[0]}-{i}"] for i in (1, 2)] if args in (["scheduler"], ["conductor"]) else [args])]


@pytest.fixture(params=SERVER_BACKENDS)
def cloud_with_room_for_10(request, tmp_path):
    with running_cloud(request.param, tmp_path, _TWO_SCHEDULERS_TWO_CONDUCTORS, **_FIVE_TINY_SERVERS) as cloud:
        yield cloud


def test_50_boots_through_two_schedulers_fill_10_slots_exactly(cloud_with_room_for_10):
    """Exactly 10 of 50 boots ACTIVE on two hosts with room for 5 each, 40 in ERROR with "No valid
    host", no host over its capacity, no 500. A claim trusting the scheduler's
    capacity check (its UPDATE without the compare-and-swap's conditions) put 26 to 34 ACTIVE on
    PostgreSQL and 12 to 34 on MariaDB for the 10 slots."""
    compute, _network, procs = cloud_with_room_for_10
    with procs.held("conductor"):  # the 50 builds reach the schedulers together
        answers = asyncio.run(_create_servers([str(compute.base_url).rstrip("/")], 50))
    assert sorted({a.status_code for a in answers}) == [202], [a.text[:200] for a in answers if a.status_code != 202][:3]
    servers = _steady_servers(compute, 50, procs)
    active = [s for s in servers if s["status"] == "ACTIVE"]
    errors = [s for s in servers if s["status"] == "ERROR"]
    assert (len(active), len(errors)) == (10, 40), (len(active), len(errors))
    assert all("No valid host" in s["fault"]["message"] for s in errors), [s["fault"] for s in errors][:3]
    per_host = {h: [s["OS-EXT-SRV-ATTR:host"] for s in active].count(h) for h in ("mp-compute-1", "mp-compute-2")}
    assert per_host == {"mp-compute-1": 5, "mp-compute-2": 5}, per_host
    for hyp in compute.get("/v2.1/os-hypervisors/detail").json()["hypervisors"]:
        assert (hyp["local_gb"], hyp["local_gb_used"], hyp["running_vms"]) == (5, 5, 5), hyp
    claimed = _query(procs.env["NEFOS_DATABASE_URL"],
                     "SELECT n.host, n.local_gb * n.disk_allocation_ratio, sum(a.disk_gb), count(*) "
                     "FROM allocations a JOIN compute_nodes n ON n.id = a.compute_node_id GROUP BY n.id, n.host, "
                     "n.local_gb, n.disk_allocation_ratio")
    assert sorted((host, float(room), int(used), n) for host, room, used, n in claimed) == [
        ("mp-compute-1", 5.0, 5, 5), ("mp-compute-2", 5.0, 5, 5)], claimed


def test_a_new_projects_first_20_requests_at_once_make_one_default_group(two_network_services):
    """A new project's first 10 security group lists and 10 port creates at once, through two
    network processes: one ``default`` group with its 4 rules, every port in it, no 409/500. The
    project's unique default-group row names the group: a group looked up by name would be made
    several times over on PostgreSQL and answer 500 on MariaDB."""
    urls, _db_url, procs = two_network_services
    r = httpx.post(f"{urls[0]}/v2.0/networks", json={"network": {"name": "shared", "shared": True}}, headers=ADMIN,
                   verify=verified_tls())
    assert r.status_code == 201, r.text
    net = r.json()["network"]["id"]
    r = httpx.post(f"{urls[0]}/v2.0/subnets", headers=ADMIN, json={"subnet": {
        "network_id": net, "cidr": "10.89.0.0/24", "ip_version": 4}}, verify=verified_tls())
    assert r.status_code == 201, r.text
    project = uuid.uuid4().hex
    member = {"X-Project-Id": project, "X-User-Id": uuid.uuid4().hex, "X-Roles": "member,reader"}

    async def first_requests() -> list[httpx.Response]:
        clients = [httpx.AsyncClient(verify=verified_tls(), base_url=url, headers=member, timeout=120) for url in urls]
        try:
            return await asyncio.gather(*[
                clients[i % 2].get("/v2.0/security-groups") if i % 4 < 2 else
                clients[i % 2].post("/v2.0/ports", json={"port": {"network_id": net}}) for i in range(20)])
        finally:
            for c in clients:
                await c.aclose()
    answers = asyncio.run(first_requests())
    failed = [(a.status_code, a.text[:200]) for a in answers if a.status_code not in (200, 201)]
    assert failed == [], f"{len(failed)} of 20 failed, first: {failed[:3]}\n{procs.logs()[-2000:]}"
    groups = httpx.get(f"{urls[0]}/v2.0/security-groups", params={"project_id": project}, headers=ADMIN,
                       verify=verified_tls()).json()
    defaults = [g for g in groups["security_groups"] if g["name"] == "default"]
    assert len(defaults) == 1, [g["id"] for g in defaults]
    (default,) = defaults
    assert sorted((r["direction"], r["ethertype"]) for r in default["security_group_rules"]) == [
        ("egress", "IPv4"), ("egress", "IPv6"), ("ingress", "IPv4"), ("ingress", "IPv6")]
    for listed in (a.json()["security_groups"] for a in answers if a.request.method == "GET"):
        assert [g["id"] for g in listed] == [default["id"]]
    for port in (a.json()["port"] for a in answers if a.request.method == "POST"):
        assert port["security_groups"] == [default["id"]]
