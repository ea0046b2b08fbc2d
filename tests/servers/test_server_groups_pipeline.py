"""Server groups through the whole pipeline: affinity, anti-affinity, their soft variants,
and the compute host's late check turning a scheduling race into a reschedule.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.clouds import start_cloud, stop_cloud


async def make_group(cloud, policy: str) -> str:
    r = await cloud.compute.post("/v2.1/os-server-groups",  # the soft policies came with 2.15
                                 json={"server_group": {"name": f"g-{policy}", "policies": [policy]}},
                                 headers={"OpenStack-API-Version": "compute 2.15"})
    assert r.status_code == 200, r.text
    return r.json()["server_group"]["id"]


async def boot_in_group(cloud, group: str, net: dict, name: str = "m", **server) -> list[str]:
    body = {"server": {"name": name, "imageRef": await cloud.default_image(), "flavorRef": "1",
                       "networks": [{"uuid": net["id"]}], **server},
            "os:scheduler_hints": {"group": group}}
    if server.get("min_count", 1) > 1:
        body["server"]["return_reservation_id"] = True
    r = await cloud.compute.post("/v2.1/servers", json=body)
    assert r.status_code == 202, r.text
    if "reservation_id" in r.json():
        r = await cloud.compute.get("/v2.1/servers", params={"reservation_id": r.json()["reservation_id"]})
        return [s["id"] for s in r.json()["servers"]]
    return [r.json()["server"]["id"]]


async def settle(cloud, ids: list[str]) -> dict[str, dict]:
    return {i: await cloud.wait_status(i, {"ACTIVE", "ERROR"}) for i in ids}


def hosts_of(servers) -> list[str]:
    return [s["OS-EXT-SRV-ATTR:host"] for s in servers if s["status"] == "ACTIVE"]


async def group_members(cloud, group: str) -> set[str]:
    r = await cloud.compute.get(f"/v2.1/os-server-groups/{group}")
    return set(r.json()["server_group"]["members"])


async def build_attempts(cloud, server_id: str) -> list[dict]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    request_id = r.json()["instanceActions"][-1]["request_id"]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
    return [e for e in r.json()["instanceAction"]["events"] if e["event"] == "compute__do_build_and_run_instance"]


async def test_affinity_keeps_members_together(cloud):
    net = await cloud.make_network()
    group = await make_group(cloud, "affinity")
    ids = []
    for i in range(3):
        ids += await boot_in_group(cloud, group, net, name=f"a{i}")
        await settle(cloud, ids)
    ids += await boot_in_group(cloud, group, net, name="batch", min_count=2, max_count=2)
    servers = await settle(cloud, ids)
    assert [s["status"] for s in servers.values()] == ["ACTIVE"] * 5
    assert len(set(hosts_of(servers.values()))) == 1
    assert await group_members(cloud, group) == set(ids)


async def test_anti_affinity_spreads_members_and_refuses_a_third_on_two_hosts(cloud):
    net = await cloud.make_network()
    group = await make_group(cloud, "anti-affinity")
    ids = []
    for i in range(2):
        ids += await boot_in_group(cloud, group, net, name=f"x{i}")
        await settle(cloud, ids)
    servers = await settle(cloud, ids)
    assert sorted(hosts_of(servers.values())) == ["host-1", "host-2"]
    (third,) = await boot_in_group(cloud, group, net, name="x2")
    server = await cloud.wait_status(third, "ERROR")
    assert "No valid host" in server["fault"]["message"]
    assert server["OS-EXT-SRV-ATTR:host"] is None
    # No claim, guest or port left for the refused member.
    assert await cloud.ports(device_id=third) == []
    assert (await cloud.hypervisor_usage())["running_vms"] == 2
    # A multi-create that cannot fit the policy is refused as a whole.
    group2 = await make_group(cloud, "anti-affinity")
    batch = await boot_in_group(cloud, group2, net, name="y", min_count=3, max_count=3)
    servers = await settle(cloud, batch)
    assert [s["status"] for s in servers.values()] == ["ERROR"] * 3
    assert (await cloud.hypervisor_usage())["running_vms"] == 2


async def test_soft_anti_affinity_spreads_but_never_fails(cloud):
    net = await cloud.make_network()
    group = await make_group(cloud, "soft-anti-affinity")
    ids = []
    for i in range(4):
        ids += await boot_in_group(cloud, group, net, name=f"s{i}")
        servers = await settle(cloud, ids)
    assert [s["status"] for s in servers.values()] == ["ACTIVE"] * 4
    hosts = hosts_of(servers.values())
    assert sorted(hosts) == ["host-1", "host-1", "host-2", "host-2"]
    assert hosts[0] != hosts[1]  # the second member avoided the first's host


async def test_soft_affinity_gathers_members_despite_the_spread_weigher(cloud):
    net = await cloud.make_network()
    # Someone else's server makes host-1 the fuller host: the RAM spread weigher pulls away from it.
    other = (await cloud.boot(name="other", networks=[{"uuid": net["id"]}],
                              availability_zone="nova:host-1"))["server"]["id"]
    await cloud.wait_status(other, "ACTIVE")
    group = await make_group(cloud, "soft-affinity")
    ids = []
    for i in range(4):
        ids += await boot_in_group(cloud, group, net, name=f"t{i}")
        servers = await settle(cloud, ids)
    assert [s["status"] for s in servers.values()] == ["ACTIVE"] * 4
    assert len(set(hosts_of(servers.values()))) == 1, hosts_of(servers.values())


async def test_soft_policies_never_fail_when_the_preferred_hosts_are_full(tmp_path):
    # Two one-vCPU places per host (2 vCPUs at ratio 1.0).
    cloud = await start_cloud(tmp_path, fake_hosts=2, fake_vcpus=2, cpu_allocation_ratio=1.0)
    try:
        net = await cloud.make_network()
        affinity = await make_group(cloud, "soft-affinity")
        ids = []
        for i in range(3):
            ids += await boot_in_group(cloud, affinity, net, name=f"sa{i}")
            servers = await settle(cloud, ids)
        assert [s["status"] for s in servers.values()] == ["ACTIVE"] * 3
        assert sorted(hosts_of(servers.values())).count(hosts_of(servers.values())[0]) == 2
        anti = await make_group(cloud, "soft-anti-affinity")
        (last,) = await boot_in_group(cloud, anti, net, name="saa")
        assert (await cloud.wait_status(last, "ACTIVE"))["status"] == "ACTIVE"
    finally:
        await stop_cloud(cloud)


class StaleScheduler:
    """Makes every first scheduling attempt see a stale world (as a scheduler lagging behind the
    database would): group members' hosts unknown and host usage as of the first request, so
    concurrent boots are placed without seeing each other. Reschedules see the real world."""

    def __init__(self, cloud, monkeypatch, *, placements: list[str] | None = None):
        self.scheduler = next(c for c in cloud.cloud.components if c.name == "scheduler").service.endpoint
        self.snapshot = None
        self.placements = placements  # first attempts go to these hosts, in order
        self.first_attempts = 0
        real_load = self.scheduler._host_states
        real_group_hosts = self.scheduler._group_hosts
        real_select = self.scheduler.select_destinations
        stale = self

        async def select_destinations(ctx, request_spec, instance_uuids):
            first = (request_spec.get("retry") or {}).get("num_attempts", 1) == 1
            if not first:
                return await real_select(ctx, request_spec, instance_uuids)
            stale.first_attempts += 1
            index = stale.first_attempts - 1
            token = _STALE.set((index,))
            try:
                return await real_select(ctx, request_spec, instance_uuids)
            finally:
                _STALE.reset(token)

        async def host_states(spec, **kwargs):
            hosts = await real_load(spec, **kwargs)
            if _STALE.get() is None:
                return hosts
            if stale.snapshot is None:
                stale.snapshot = copy.deepcopy(hosts)
            hosts = copy.deepcopy(stale.snapshot)
            if stale.placements is not None:
                (index,) = _STALE.get()
                hosts = [h for h in hosts if h.host == stale.placements[index]]
            return hosts

        async def group_hosts(group):
            return [] if _STALE.get() is not None else await real_group_hosts(group)

        monkeypatch.setattr(self.scheduler, "_host_states", host_states)
        monkeypatch.setattr(self.scheduler, "_group_hosts", group_hosts)
        monkeypatch.setattr(self.scheduler, "select_destinations", select_destinations)


import contextvars  # noqa: E402

_STALE: contextvars.ContextVar = contextvars.ContextVar("stale_scheduling", default=None)


async def test_anti_affinity_race_becomes_a_reschedule_not_a_violation(cloud, monkeypatch):
    net = await cloud.make_network()
    group = await make_group(cloud, "anti-affinity")
    stale = StaleScheduler(cloud, monkeypatch)
    created = await asyncio.gather(boot_in_group(cloud, group, net, name="r1"),
                                   boot_in_group(cloud, group, net, name="r2"))
    ids = [i for c in created for i in c]
    servers = await settle(cloud, ids)
    assert stale.first_attempts == 2
    assert [s["status"] for s in servers.values()] == ["ACTIVE", "ACTIVE"]
    assert sorted(hosts_of(servers.values())) == ["host-1", "host-2"]  # never both on one host
    # Both were first sent to the same host; exactly one lost the late check there and was rescheduled.
    attempts = {i: await build_attempts(cloud, i) for i in ids}
    rescheduled = [i for i, a in attempts.items() if len(a) == 2]
    assert len(rescheduled) == 1, attempts
    first, second = attempts[rescheduled[0]]
    assert first["result"] == "Error" and second["result"] == "Success"
    kept = next(i for i in ids if i not in rescheduled)
    assert [e["result"] for e in attempts[kept]] == ["Success"]
    for host in cloud.hosts:
        assert len(cloud.driver(host).guests) == 1
    usage = await cloud.hypervisor_usage()
    assert usage["allocations"] == 2 and usage["running_vms"] == 2


async def test_affinity_race_becomes_a_reschedule_not_a_violation(cloud, monkeypatch):
    net = await cloud.make_network()
    group = await make_group(cloud, "affinity")
    # The stale scheduler sends the two first attempts to different hosts.
    StaleScheduler(cloud, monkeypatch, placements=["host-1", "host-2"])
    created = await asyncio.gather(boot_in_group(cloud, group, net, name="p1"),
                                   boot_in_group(cloud, group, net, name="p2"))
    ids = [i for c in created for i in c]
    servers = await settle(cloud, ids)
    assert [s["status"] for s in servers.values()] == ["ACTIVE", "ACTIVE"]
    assert len(set(hosts_of(servers.values()))) == 1
    attempts = {i: await build_attempts(cloud, i) for i in ids}
    assert sorted(len(a) for a in attempts.values()) == [1, 2], attempts
    usage = await cloud.hypervisor_usage()
    assert usage["allocations"] == 2 and usage["running_vms"] == 2


@pytest.mark.parametrize("policy", ["affinity", "anti-affinity"])
async def test_late_check_violations_are_recorded_in_the_failed_attempt(cloud, monkeypatch, policy):
    net = await cloud.make_network()
    group = await make_group(cloud, policy)
    placements = ["host-1", "host-1"] if policy == "anti-affinity" else ["host-1", "host-2"]
    StaleScheduler(cloud, monkeypatch, placements=placements)
    ids = []
    for name in ("q1", "q2"):
        ids += await boot_in_group(cloud, group, net, name=name)
        await settle(cloud, ids)
    attempts = await build_attempts(cloud, ids[1])
    assert [e["result"] for e in attempts] == ["Error", "Success"]
    r = await cloud.compute.get(f"/v2.1/servers/{ids[1]}/os-instance-actions")
    request_id = r.json()["instanceActions"][-1]["request_id"]
    r = await cloud.compute.get(f"/v2.1/servers/{ids[1]}/os-instance-actions/{request_id}")
    failed = [e for e in r.json()["instanceAction"]["events"] if e["result"] == "Error"]
    assert any("instance group policy was violated" in (e.get("traceback") or "") for e in failed), failed
