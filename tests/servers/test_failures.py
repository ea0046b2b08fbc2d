"""Failures: reschedules, ERROR with a fault, and deletes racing each build step, leaking nothing."""

from __future__ import annotations

import asyncio

import pytest

from nefos.model import states
from tests.clouds import ADMIN


async def _flavor_with_specs(cloud, flavor_id: str, specs: dict) -> str:
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
        "name": f"f-{flavor_id}", "id": flavor_id, "ram": 256, "vcpus": 1, "disk": 1}})
    assert r.status_code == 200, r.text
    r = await cloud.compute.post(f"/v2.1/flavors/{flavor_id}/os-extra_specs", json={"extra_specs": specs})
    assert r.status_code == 200, r.text
    return flavor_id


async def _events(cloud, server_id) -> list[dict]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    request_id = r.json()["instanceActions"][-1]["request_id"]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
    return r.json()["instanceAction"]["events"]


async def _assert_nothing_leaked(cloud, server_id):
    assert await cloud.ports(device_id=server_id) == []
    usage = await cloud.hypervisor_usage()
    assert usage == {"vcpus_used": 0, "memory_mb_used": 0, "running_vms": 0, "allocations": 0}, usage
    for host in cloud.hosts:
        assert server_id not in cloud.driver(host).guests


async def test_failing_host_reschedules_to_another(cloud):
    net = await cloud.make_network()
    flavor = await _flavor_with_specs(cloud, "fail-h1", {"nefos:fake_fail_spawn": "host-1"})
    server_ids = [(await cloud.boot(flavor=flavor, networks=[{"uuid": net["id"]}]))["server"]["id"]
                  for _ in range(3)]
    for server_id in server_ids:
        server = await cloud.wait_status(server_id, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == "host-2"
        assert len(await cloud.ports(device_id=server_id)) == 1
    # At least one went to host-1 first (spread weigher), failed there and was rescheduled.
    attempts = [[e for e in await _events(cloud, s) if e["event"] == "compute__do_build_and_run_instance"]
                for s in server_ids]
    assert any(len(a) == 2 and a[0]["result"] == "Error" and a[1]["result"] == "Success" for a in attempts)


async def test_all_hosts_failing_ends_in_error_with_fault(cloud):
    net = await cloud.make_network()
    flavor = await _flavor_with_specs(cloud, "fail-all", {"nefos:fake_fail_spawn": "*"})
    server_id = (await cloud.boot(flavor=flavor, networks=[{"uuid": net["id"]}]))["server"]["id"]
    server = await cloud.wait_status(server_id, "ERROR")
    assert "No valid host" in server["fault"]["message"] or "retries" in server["fault"]["message"]
    assert server["fault"]["code"] == 500
    events = await _events(cloud, server_id)
    builds = [e for e in events if e["event"] == "compute__do_build_and_run_instance"]
    schedules = [e for e in events if e["event"] == "conductor_schedule_and_build_instances"]
    assert len(builds) == 2 and all(e["result"] == "Error" for e in builds)  # two hosts, each tried once
    assert len(schedules) == 3 and schedules[-1]["result"] == "Error"
    await _assert_nothing_leaked(cloud, server_id)
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    await cloud.wait_gone(server_id)


class Gate:
    """Holds one coroutine of the pipeline until the test releases it: before it starts, or
    (``after``) once it has done its work (its ports, claim or guest exist) but before it returns."""

    def __init__(self, after: bool = False):
        self.after = after
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def wrap(self, fn):
        async def gated(*args, **kwargs):
            if not self.after:
                self.reached.set()
                await self.release.wait()
            result = await fn(*args, **kwargs)
            if self.after:
                self.reached.set()
                await self.release.wait()
            return result
        return gated


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", ["scheduling", "claim", "networking", "block_device_mapping", "spawning"])
async def test_delete_during_each_build_step_leaks_nothing(cloud, monkeypatch, step, when):
    net = await cloud.make_network()
    gate = Gate(after=when == "after")
    if step == "scheduling":
        conductor = next(c for c in cloud.cloud.components if c.name == "conductor").service.endpoint
        monkeypatch.setattr(conductor.scheduler, "select_destinations",
                            gate.wrap(conductor.scheduler.select_destinations))
    for host in cloud.hosts:
        manager = cloud.compute_manager(host)
        if step == "claim":
            monkeypatch.setattr(manager.resource_tracker, "instance_claim",
                                gate.wrap(manager.resource_tracker.instance_claim))
        elif step == "networking":
            monkeypatch.setattr(manager.network_api, "allocate_for_instance",
                                gate.wrap(manager.network_api.allocate_for_instance))
        elif step == "block_device_mapping":
            monkeypatch.setattr(manager, "prep_block_device", gate.wrap(manager.prep_block_device))
        elif step == "spawning":
            monkeypatch.setattr(manager.driver, "spawn", gate.wrap(manager.driver.spawn))
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await asyncio.wait_for(gate.reached.wait(), 10)
    if when == "after":  # what the step made exists when the delete comes
        if step in ("scheduling", "claim"):
            assert (await cloud.hypervisor_usage())["allocations"] == 1
        elif step == "networking":
            assert len(await cloud.ports(device_id=server_id)) == 1
        elif step == "spawning":
            assert any(server_id in cloud.driver(h).guests for h in cloud.hosts)
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    gate.release.set()
    await cloud.wait_gone(server_id)
    # The aborted build cleans up after the delete returned: give it a few seconds to converge.
    for _ in range(250):
        try:
            await _assert_nothing_leaked(cloud, server_id)
            break
        except AssertionError:
            await asyncio.sleep(0.02)
    await _assert_nothing_leaked(cloud, server_id)
    usage = await cloud.quota_usage(ADMIN.get("X-Project-Id", "00000000000000000000000000000001"))
    assert (usage["instances"], usage["cores"], usage["ram"]) == (0, 0, 0)
