"""Network allocation retries: ``network_allocate_retries`` with backoff 1, 2, 4 … capped.

The network service in the running cloud is made to fail ``create_port`` on
purpose; the backoff pauses of the retry helper the compute manager retries
through are recorded instead of slept (``nefos.waiting``'s ``asyncio`` is
swapped for one whose ``sleep`` only yields), so the tests stay fast while
asserting the exact sequence.
"""

from __future__ import annotations

import asyncio
import types

import pytest

from nefos import exceptions, waiting
from tests.clouds import start_cloud, stop_cloud


@pytest.fixture
def backoff(monkeypatch) -> list[float]:
    """The pauses between retries, in order (without sleeping them)."""
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay, result=None):
        delays.append(delay)
        return await real_sleep(0, result)

    proxy = types.SimpleNamespace(**{name: getattr(asyncio, name) for name in dir(asyncio)
                                     if not name.startswith("__")})
    proxy.sleep = sleep
    monkeypatch.setattr(waiting, "asyncio", proxy)
    return delays


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2, network_allocate_retries=2)
    yield harness
    await stop_cloud(harness)


class FlakyPorts:
    """Makes the network service's create_port fail: the first ``times`` calls, or always on ``network``."""

    def __init__(self, cloud, monkeypatch, *, times: int = 0, network: str | None = None):
        self.manager = next(c for c in cloud.cloud.components if c.name == "network").manager
        self.real = self.manager.create_port
        self.times, self.network = times, network
        self.calls = self.failures = 0
        monkeypatch.setattr(self.manager, "create_port", self.create_port)

    async def create_port(self, ctx, port: dict, binding_host_id: str | None = None) -> dict:
        self.calls += 1
        if self.failures < self.times or (self.network and port.get("network_id") == self.network):
            self.failures += 1
            raise exceptions.Conflict("Neutron is having a bad moment (injected)")
        return await self.real(ctx, port, binding_host_id=binding_host_id)


async def _allocate_events(cloud, server_id: str) -> list[dict]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    request_id = r.json()["instanceActions"][-1]["request_id"]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
    return [e for e in r.json()["instanceAction"]["events"] if e["event"] == "compute_allocate_network"]


async def test_transient_failure_is_retried_and_the_server_becomes_active(cloud, monkeypatch, backoff):
    net = await cloud.make_network()
    flaky = FlakyPorts(cloud, monkeypatch, times=2)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert flaky.failures == 2 and flaky.calls == 3
    assert backoff == [1.0, 2.0]
    (addr,) = server["addresses"]["private"]
    ports = await cloud.ports(device_id=server_id)
    assert [p["fixed_ips"][0]["ip_address"] for p in ports] == [addr["addr"]]
    assert len(await cloud.ports(network_id=net["id"])) == 1  # the failed attempts left nothing behind
    (event,) = await _allocate_events(cloud, server_id)
    assert event["result"] == "Success"
    # No reschedule: the retries happen on the host that claimed the server.
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    request_id = r.json()["instanceActions"][-1]["request_id"]
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
    builds = [e for e in r.json()["instanceAction"]["events"] if e["event"] == "compute__do_build_and_run_instance"]
    assert [e["result"] for e in builds] == ["Success"]


async def test_exhausted_retries_end_in_error_with_fault_and_no_leaked_ports(cloud, monkeypatch, backoff):
    good = await cloud.make_network("good", "10.0.0.0/24")
    bad = await cloud.make_network("bad", "10.9.0.0/24")
    ports_before = len(await cloud.ports())
    # Each attempt creates the port on "good", then fails on "bad": the first must be undone.
    flaky = FlakyPorts(cloud, monkeypatch, network=bad["id"])
    server_id = (await cloud.boot(networks=[{"uuid": good["id"]}, {"uuid": bad["id"]}]))["server"]["id"]
    server = await cloud.wait_status(server_id, "ERROR")
    assert flaky.failures == 3 and flaky.calls == 6  # 1 + network_allocate_retries attempts
    assert backoff == [1.0, 2.0]
    fault = server["fault"]
    assert fault["code"] == 500
    assert "Failed to allocate the network(s)" in fault["message"]
    assert "bad moment" in fault["details"]
    assert server["addresses"] == {}
    assert await cloud.ports(device_id=server_id) == []
    assert len(await cloud.ports()) == ports_before
    (event,) = await _allocate_events(cloud, server_id)
    assert event["result"] == "Error"
    # The network failure aborts the build: no reschedule, and the claim is given back.
    usage = await cloud.hypervisor_usage()
    assert usage["allocations"] == 0 and usage["running_vms"] == 0
    for host in cloud.hosts:
        assert server_id not in cloud.driver(host).guests
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
    assert r.status_code == 204
    await cloud.wait_gone(server_id)


@pytest.mark.parametrize("retries,cap,expected", [
    (7, 30.0, [1, 2, 4, 8, 16, 30, 30]),  # Nova's sequence with the default cap
    (5, 5.0, [1, 2, 4, 5, 5]),
    (0, 30.0, []),  # no retries: the first failure is final
])
async def test_backoff_doubles_up_to_the_cap(cloud, monkeypatch, backoff, retries, cap, expected):
    cloud.rt.cfg.network_allocate_retries = retries
    cloud.rt.cfg.network_allocate_backoff_max = cap
    net = await cloud.make_network()
    flaky = FlakyPorts(cloud, monkeypatch, times=retries + 1)  # every attempt fails
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(server_id, "ERROR")
    assert backoff == expected
    assert flaky.calls == retries + 1
    assert await cloud.ports() == []
