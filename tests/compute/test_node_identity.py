"""The compute node's stable identity (Nova's compute_id): a restart keeps it; a renamed host or a
state that belongs to another node refuses to start, before any guest is touched."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from nefos.host.compute import node_identity
from nefos.host.compute.node_identity import ComputeIdentityMismatch
from nefos.clients.conductor import ConductorAPI
from nefos.db.models import ComputeNode
from nefos.host.virt.fake import FakeDriver
from tests.compute.conftest import boot_active, crash_compute, start_compute


async def _node_uuids(cloud, host: str) -> list[str]:
    async with cloud.rt.db.reader() as s:
        return list((await s.execute(select(ComputeNode.uuid).where(
            ComputeNode.host == host, ComputeNode.deleted == 0))).scalars())


async def test_a_restart_keeps_the_identity_written_at_first_start(cloud):
    path = node_identity.identity_path(cloud.rt.cfg, "host-1")
    (recorded,) = await _node_uuids(cloud, "host-1")
    assert path.read_text().strip() == recorded
    old = await crash_compute(cloud, "host-1")
    await start_compute(cloud, old)
    assert await _node_uuids(cloud, "host-1") == [recorded]
    await boot_active(cloud)


async def test_a_state_of_another_node_refuses_to_start_and_touches_no_guest(cloud):
    (server_id,) = await boot_active(cloud)
    old = await crash_compute(cloud, "host-1")
    path = node_identity.identity_path(cloud.rt.cfg, "host-1")
    path.write_text(str(uuid.uuid4()) + "\n")
    with pytest.raises(ComputeIdentityMismatch, match="belongs to another node"):
        await start_compute(cloud, old)
    assert server_id in old.driver.guests  # nothing was destroyed or reconciled
    assert (await cloud.server(server_id))["status"] == "ACTIVE"


async def test_a_renamed_host_refuses_to_start(cloud):
    # A compute process keeps its state (compute_id) but comes back under another host name.
    cfg = cloud.rt.cfg
    (recorded,) = await _node_uuids(cloud, "host-1")
    node_identity.identity_path(cfg, cfg.host).write_text(recorded + "\n")
    with pytest.raises(ComputeIdentityMismatch, match="recorded for host 'host-1'"):
        await node_identity.ensure_stable_identity(cloud.rt, ConductorAPI(cloud.rt.bus), cfg.host,
                                                   FakeDriver(cfg, cfg.host))


async def test_an_existing_host_without_a_file_keeps_its_recorded_uuid(cloud):
    (recorded,) = await _node_uuids(cloud, "host-1")
    path = node_identity.identity_path(cloud.rt.cfg, "host-1")
    path.unlink()
    old = await crash_compute(cloud, "host-1")
    await start_compute(cloud, old)
    assert path.read_text().strip() == recorded
    assert await _node_uuids(cloud, "host-1") == [recorded]
