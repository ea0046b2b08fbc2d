"""Scale: 200 servers created at once over 10 fake hosts, all through the REST API.

All reach ACTIVE; no host is overcommitted (each compute node's usage stays
within its totals times the allocation ratios and equals the sum of its
allocations); no IP is handed out twice; deleting them all brings the
hypervisor usage (os-hypervisors), the quota usage (os-quota-sets detail)
and the port count back to where they started.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, select

from nefos.db.models import Allocation, ComputeNode
from tests.clouds import member, start_cloud, stop_cloud

SERVERS = 200
HOSTS = 10
PROJECT = "5" * 32


async def _wait_all(cloud, ids: list[str], wanted: set[str], headers: dict, timeout: float) -> dict[str, dict]:
    """Poll the detail list (one request per round) until every server is in ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        r = await cloud.compute.get("/v2.1/servers/detail", params={"limit": 1000}, headers=headers)
        assert r.status_code == 200, r.text
        servers = {s["id"]: s for s in r.json()["servers"] if s["id"] in ids}
        done = [s for s in servers.values() if s["status"] in wanted and s["OS-EXT-STS:task_state"] is None]
        if len(done) == len(ids):
            return servers
        if time.monotonic() > deadline:
            states = {}
            for s in servers.values():
                states[s["status"]] = states.get(s["status"], 0) + 1
            raise AssertionError(f"after {timeout}s: {states}; missing {len(ids) - len(servers)}")
        await asyncio.sleep(0.5)


async def _hypervisors(cloud) -> list[dict]:
    r = await cloud.compute.get("/v2.1/os-hypervisors/detail")
    assert r.status_code == 200, r.text
    return r.json()["hypervisors"]


async def _quota_in_use(cloud) -> dict:
    r = await cloud.compute.get(f"/v2.1/os-quota-sets/{PROJECT}/detail")
    assert r.status_code == 200, r.text
    q = r.json()["quota_set"]
    return {k: q[k]["in_use"] for k in ("instances", "cores", "ram")}


async def test_200_servers_at_once_over_10_hosts(tmp_path):
    # 11 vCPUs x 2.0 = 22 one-vCPU servers per host: 220 places for 200 servers, so the
    # claims are tight enough that any overcommit or lost update would show.
    # The test's client runs in the cloud's own event loop: while the loop works through 200 creates
    # on a busy machine, a connection the client opened can wait longer than the shipped request-head
    # deadline (10 s from the connection) before the client gets to send its head, and the listener
    # closes it. The deadline itself is tests/api/test_slow_connections.py's, with the shipped value.
    cloud = await start_cloud(tmp_path, fake_hosts=HOSTS, fake_vcpus=11, cpu_allocation_ratio=2.0,
                              quota_instances=-1, quota_cores=-1, quota_ram=-1, quota_ports=-1,
                              rpc_response_timeout=120.0, http_request_timeout=60.0)
    headers = member(PROJECT)
    try:
        net = await cloud.make_network("scale", "10.20.0.0/22", headers=headers)
        ports_before = len(await cloud.ports())
        assert all(h["running_vms"] == 0 for h in await _hypervisors(cloud))
        image = await cloud.default_image()
        body = {"imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}]}

        async def create(i: int) -> str:
            r = await cloud.compute.post("/v2.1/servers", json={"server": {"name": f"s{i}", **body}},
                                         headers=headers)
            assert r.status_code == 202, r.text
            return r.json()["server"]["id"]

        started = time.monotonic()
        ids = await asyncio.gather(*[create(i) for i in range(SERVERS)])
        assert len(set(ids)) == SERVERS
        servers = await _wait_all(cloud, ids, {"ACTIVE", "ERROR"}, headers, timeout=45)
        elapsed = time.monotonic() - started
        errors = [s for s in servers.values() if s["status"] == "ERROR"]
        assert not errors, [s.get("fault") for s in errors[:3]]
        print(f"\n{SERVERS} servers ACTIVE over {HOSTS} hosts in {elapsed:.1f} s "
              f"({SERVERS / elapsed:.0f} servers/s)")

        # No IP twice, one port per server, each on its server's host.
        ips = [a["addr"] for s in servers.values() for a in s["addresses"]["scale"]]
        assert len(ips) == len(set(ips)) == SERVERS
        ports = await cloud.ports(network_id=net["id"])
        mine = [p for p in ports if p["device_id"] in servers]
        assert len(mine) == SERVERS
        assert len({p["fixed_ips"][0]["ip_address"] for p in mine}) == SERVERS

        # No host overcommitted: usage within capacity x ratio and equal to its allocations.
        admin_view = await cloud.compute.get("/v2.1/servers/detail", params={"all_tenants": 1, "limit": 1000})
        per_host: dict[str, int] = {}
        for s in admin_view.json()["servers"]:
            per_host[s["OS-EXT-SRV-ATTR:host"]] = per_host.get(s["OS-EXT-SRV-ATTR:host"], 0) + 1
        async with cloud.rt.db.reader() as s:
            nodes = (await s.execute(select(ComputeNode).where(ComputeNode.deleted == 0))).scalars().all()
            sums = {row[0]: row[1:] for row in (await s.execute(
                select(Allocation.compute_node_id, func.sum(Allocation.vcpus), func.sum(Allocation.memory_mb),
                       func.sum(Allocation.disk_gb), func.count(Allocation.id))
                .group_by(Allocation.compute_node_id))).all()}
        assert len(nodes) == HOSTS
        for node in nodes:
            assert node.vcpus_used <= node.vcpus * node.cpu_allocation_ratio, node.host
            assert node.memory_mb_used <= node.memory_mb * node.ram_allocation_ratio, node.host
            assert node.local_gb_used <= node.local_gb * node.disk_allocation_ratio, node.host
            assert sums.get(node.id, (0, 0, 0, 0)) == (node.vcpus_used, node.memory_mb_used,
                                                       node.local_gb_used, node.running_vms), node.host
            assert per_host.get(node.host, 0) == node.running_vms, node.host
            assert len(cloud.driver(node.host).guests) == node.running_vms, node.host
        hypervisors = {h["hypervisor_hostname"]: h for h in await _hypervisors(cloud)}
        assert sum(h["running_vms"] for h in hypervisors.values()) == SERVERS
        assert all(h["vcpus_used"] <= 22 for h in hypervisors.values())
        assert sum(1 for h in hypervisors.values() if h["running_vms"]) == HOSTS  # spread over all
        assert await _quota_in_use(cloud) == {"instances": SERVERS, "cores": SERVERS, "ram": SERVERS * 512}

        # Delete them all, at once as well.
        async def delete(server_id: str) -> None:
            r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=headers)
            assert r.status_code == 204, r.text

        await asyncio.gather(*[delete(i) for i in ids])
        deadline = time.monotonic() + 30
        while True:
            r = await cloud.compute.get("/v2.1/servers", headers=headers)
            if not r.json()["servers"]:
                break
            assert time.monotonic() < deadline, f"{len(r.json()['servers'])} servers left"
            await asyncio.sleep(0.1)
        for h in await _hypervisors(cloud):
            assert (h["vcpus_used"], h["memory_mb_used"], h["local_gb_used"], h["running_vms"]) == (0, 0, 0, 0), h
        assert await _quota_in_use(cloud) == {"instances": 0, "cores": 0, "ram": 0}
        assert len(await cloud.ports()) == ports_before
        assert (await cloud.hypervisor_usage())["allocations"] == 0
        for host in cloud.hosts:
            assert cloud.driver(host).guests == {}
    finally:
        await stop_cloud(cloud)
