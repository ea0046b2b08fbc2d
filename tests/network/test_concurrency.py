"""IP allocation, MACs, quotas and the default group under concurrent requests."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from nefos import exceptions
from nefos.config import load_config
from nefos.context import admin_context
from nefos.control.network import ipam
from nefos.clients.network import network_rpc
from nefos.control.network.service import component
from nefos.service import Runtime
from nefos.http_client import verified_tls
from tests.backends import BACKENDS, fresh_database, migrated
from tests.network.conftest import ADMIN, PROJECT, member, member_ctx


async def test_100_ports_at_once_get_distinct_addresses(h, client):
    net = await h.network()
    await h.subnet(net["id"], "10.0.0.0/24")
    results = await asyncio.gather(*[
        client.post("/v2.0/ports", json={"port": {"network_id": net["id"], "name": f"p{i}"}})
        for i in range(100)])
    assert [r.status_code for r in results] == [201] * 100
    ports = [r.json()["port"] for r in results]
    ips = [p["fixed_ips"][0]["ip_address"] for p in ports]
    macs = [p["mac_address"] for p in ports]
    assert len(set(ips)) == 100 and len(set(macs)) == 100
    listed = (await client.get("/v2.0/ports", params={"network_id": net["id"]})).json()["ports"]
    assert sorted(p["fixed_ips"][0]["ip_address"] for p in listed) == sorted(ips)


async def test_100_ports_over_the_bus_on_a_small_subnet(rt, h):
    """A /27 has 29 free addresses: 29 ports succeed, the rest fail cleanly, nothing is doubled."""
    net = await h.network()
    await h.subnet(net["id"], "10.7.0.0/27")
    ctx = admin_context()
    results = await asyncio.gather(*[
        network_rpc(rt.bus).call(ctx, "create_port", port={"network_id": net["id"]}) for _ in range(100)],
        return_exceptions=True)
    ok = [r for r in results if isinstance(r, dict)]
    failed = [r for r in results if not isinstance(r, dict)]
    assert len(ok) == 29
    assert all(isinstance(e, exceptions.IpAddressGenerationFailure) for e in failed)
    ips = [p["fixed_ips"][0]["ip_address"] for p in ok]
    assert len(set(ips)) == 29 and "10.7.0.1" not in ips
    ports = await network_rpc(rt.bus).call(ctx, "list_ports", filters={"network_id": [net["id"]]})
    assert len(ports) == 29  # the failed ones left no port behind


async def test_candidate_taken_by_a_racer_is_retried(manager, h, monkeypatch):
    """The primary key, not the read, decides: a candidate someone else holds is skipped."""
    net = await h.network()
    await h.subnet(net["id"], "10.8.0.0/29")
    first = await h.port(net["id"])
    taken = first["fixed_ips"][0]["ip_address"]
    real = ipam.candidates
    calls = []

    def stale_candidates(pools, _taken):
        calls.append(set(_taken))
        if len(calls) == 1:
            # as if our read of the allocations happened before the racer's commit
            yield taken
        yield from real(pools, _taken)
    monkeypatch.setattr(ipam, "candidates", stale_candidates)
    manager.ports._last_ip.clear()  # no hint: the lowest-free scan (the hint path is the next test's)
    port = await manager.create_port(admin_context(), {"network_id": net["id"]})
    assert port["fixed_ips"][0]["ip_address"] not in (taken, "10.8.0.1")
    assert len(calls) == 2 and taken in calls[1]  # the failed insert was retried with another address


async def test_next_address_after_the_last_one_and_a_racers_address_is_skipped(rt, manager, h):
    """Addresses are handed out after the last one (no read of every allocation), the primary key
    still decides (an address another process took in between is skipped), and once the pool's end
    is reached the lowest free address (one freed by a delete) is found by the scan."""
    from sqlalchemy import insert

    from nefos.db.models import IPAllocation
    net = await h.network()
    subnet = await h.subnet(net["id"], "10.9.0.0/29")  # pool .2 - .6
    ctx = admin_context()
    first = await manager.create_port(ctx, {"network_id": net["id"]})
    assert first["fixed_ips"][0]["ip_address"] == "10.9.0.2"
    racer = await manager.create_port(ctx, {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.9.0.5"}]})
    async with rt.db.transaction() as s:  # as another process would: .3 taken behind this one's back
        await s.execute(insert(IPAllocation).values(network_id=net["id"], ip_address="10.9.0.3",
                                                    subnet_id=subnet["id"], port_id=racer["id"]))
    second = await manager.create_port(ctx, {"network_id": net["id"]})
    assert second["fixed_ips"][0]["ip_address"] == "10.9.0.4"
    third = await manager.create_port(ctx, {"network_id": net["id"]})
    assert third["fixed_ips"][0]["ip_address"] == "10.9.0.6"
    await manager.delete_port(ctx, first["id"])
    fourth = await manager.create_port(ctx, {"network_id": net["id"]})  # the end reached: .2 is free again
    assert fourth["fixed_ips"][0]["ip_address"] == "10.9.0.2"


async def test_concurrent_quota_never_overshoots(h, client):
    a = member(PROJECT)
    r = await client.put(f"/v2.0/quotas/{PROJECT}", json={"quota": {"port": 10}})
    assert r.status_code == 200
    net = await h.network(headers=a)
    await h.subnet(net["id"], headers=a)
    results = await asyncio.gather(*[
        client.post("/v2.0/ports", json={"port": {"network_id": net["id"]}}, headers=a) for _ in range(30)])
    codes = sorted(r.status_code for r in results)
    assert codes.count(201) == 10 and codes.count(409) == 20
    details = (await client.get(f"/v2.0/quotas/{PROJECT}/details", headers=a)).json()["quota"]
    assert details["port"]["used"] == 10


async def test_default_security_group_is_created_once(manager):
    ctx = member_ctx("c" * 32)
    ids = await asyncio.gather(*[manager.security_groups.ensure_default_security_group(ctx) for _ in range(20)])
    assert len(set(ids)) == 1
    groups = await manager.list_security_groups(ctx)
    assert [g["name"] for g in groups] == ["default"]


async def test_http_over_real_socket(network, tmp_path):
    """The app also serves over a real HTTP server (uvicorn), as ``nefos up`` runs it."""
    import uvicorn

    from nefos.cmd.allinone import free_port
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(network.app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(verify=verified_tls(), base_url=f"http://127.0.0.1:{port}", headers=ADMIN) as c:
            r = await c.post("/v2.0/networks", json={"network": {"name": "wire"}})
            assert r.status_code == 201
            r = await c.get("/v2.0/networks", params={"name": "wire"})
            assert [n["name"] for n in r.json()["networks"]] == ["wire"]
            assert r.headers["x-openstack-request-id"].startswith("req-")
    finally:
        server.should_exit = True
        await task


@pytest.fixture(params=[p for p in BACKENDS if p != "sqlite"])
def server_db_url(request):
    """PostgreSQL or MariaDB: a process's allocations overlap there (SQLite runs one at a time)."""
    with fresh_database(request.param) as url:
        yield url


async def test_allocations_running_at_once_in_one_process_take_the_next_addresses_without_a_scan(
        server_db_url, tmp_path, monkeypatch):
    """50 ports at once after a first one: each takes an address of its own after the last one
    handed out (claimed in the process before its INSERT), none falls back to reading every
    allocation of the network (O(addresses in use) a port, what made boots slower as a cloud grew)."""
    async with migrated(server_db_url):
        pass
    runtime = await Runtime.open(load_config(state_dir=tmp_path, auth_strategy="noauth",
                                             database_url=server_db_url), migrate=False)
    comp = component(runtime)
    await comp.start()
    try:
        manager, ctx = comp.manager, admin_context()
        net = await manager.create_network(ctx, {"name": "many"})
        await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.66.0.0/24", "ip_version": 4})
        await manager.create_port(ctx, {"network_id": net["id"]})  # the hint: the last address handed out
        scans = []
        real = ipam.candidates

        def counted_candidates(pools, taken):
            scans.append(len(taken))
            return real(pools, taken)
        monkeypatch.setattr(ipam, "candidates", counted_candidates)
        ports = await asyncio.gather(*[manager.create_port(ctx, {"network_id": net["id"]}) for _ in range(50)])
        addresses = [p["fixed_ips"][0]["ip_address"] for p in ports]
        assert len(set(addresses)) == 50
        assert scans == []
    finally:
        await comp.stop()
        await runtime.close()
