"""Helpers for the compute host's suites: a cloud, a host's instances, restarting a compute host."""

from __future__ import annotations

import pytest

from nefos.objects import instance as instance_obj
from tests.eventually import eventually  # noqa: F401  (this package's tests import it from here)
from tests.clouds import CloudHarness, start_cloud, stop_cloud

# Every out-of-band change is acted on at once and nothing runs behind the tests' back.
FAST = {"lifecycle_stopped_delay": 0.0, "sync_power_state_interval": -1}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, **FAST)
    yield harness
    await stop_cloud(harness)


@pytest.fixture
async def cloud2(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=2, **FAST)
    yield harness
    await stop_cloud(harness)


async def boot_active(cloud: CloudHarness, count: int = 1, host: str | None = None, **extra) -> list[str]:
    """Boot ``count`` servers (on ``host`` when given) and wait until they are ACTIVE."""
    net = getattr(cloud, "_test_net", None)
    if net is None:
        net = cloud._test_net = await cloud.make_network()
    if host:
        extra["availability_zone"] = f"nova:{host}"
    ids = []
    for i in range(count):
        created = await cloud.boot(name=f"vm{i}", networks=[{"uuid": net["id"]}], **extra)
        ids.append(created["server"]["id"])
    for server_id in ids:
        await cloud.wait_status(server_id, "ACTIVE")
    return ids


async def db_instance(cloud: CloudHarness, uuid: str) -> dict:
    return await instance_obj.get(cloud.rt.db, uuid)


async def set_instance(cloud: CloudHarness, uuid: str, **values) -> dict:
    return await instance_obj.save(cloud.rt.db, uuid, values)


async def action_names(cloud: CloudHarness, server_id: str) -> list[str]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions")
    assert r.status_code == 200, r.text
    return [a["action"] for a in r.json()["instanceActions"]]


def compute_component(cloud: CloudHarness, host: str):
    for c in cloud.cloud.components:
        if getattr(c, "host", None) == host and hasattr(c, "manager"):
            return c
    raise KeyError(host)


async def lifecycle_idle(cloud: CloudHarness, host: str) -> bool:
    """Whether ``host``'s lifecycle event handler has no event held, queued or being handled: every
    event the driver emitted before has had all the effect it will have."""
    handler = compute_component(cloud, host).manager.lifecycle
    return not (handler._held or handler._pending or handler._tasks)


async def crash_compute(cloud: CloudHarness, host: str):
    """Stop the host's compute process (its guests survive in its driver); returns the component."""
    old = compute_component(cloud, host)
    await old.stop()
    return old


async def start_compute(cloud: CloudHarness, old):
    """Start a new compute process for ``old``'s host with the SAME driver (the guests survive)."""
    from nefos.host.compute.service import ComputeComponent
    new = ComputeComponent(cloud.rt, old.host, driver=old.driver)
    await new.start()
    for lst in (cloud.cloud.components, cloud.cloud._started):
        if old in lst:
            lst[lst.index(old)] = new
    return new
