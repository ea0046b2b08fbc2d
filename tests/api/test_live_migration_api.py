"""os-migrateLive and a server migration's abort and force-complete: the answers Nova gives before
anything reaches a compute host (states, microversions, missing migrations). The flows between
hosts are in tests/moves/test_live_migration.py."""

from __future__ import annotations

import datetime as dt

import pytest

from nefos.db.models import utcnow
from nefos.objects import instance as instance_obj
from tests.api.conftest import PROJECT, member, version
from tests.api.test_usage_and_migrations import _migration, _server

LIVE_21 = {"os-migrateLive": {"host": None, "block_migration": False, "disk_over_commit": False}}


@pytest.fixture
async def app(rt):
    from nefos.control.compute.rest.app import create_app
    from nefos.control.compute.api import ComputeAPI
    return create_app(rt, compute_api=ComputeAPI(rt, None, None))


async def _active(rt, **values) -> str:
    uuid = await _server(rt, PROJECT, utcnow() - dt.timedelta(hours=1))
    if values:
        await instance_obj.save(rt.db, uuid, values)
    return uuid


async def _state(client, uuid: str) -> tuple[str, str | None]:
    server = (await client.get(f"/v2.1/servers/{uuid}")).json()["server"]
    return server["status"], server["OS-EXT-STS:task_state"]


async def test_live_migrate_refuses_states_hosts_and_members(client, rt):
    uuid = await _active(rt, host="host-1", node="host-1.node")
    r = await client.post(f"/v2.1/servers/{uuid}/action", json=LIVE_21, headers=member())
    assert r.status_code == 403, r.text
    body = {"os-migrateLive": {**LIVE_21["os-migrateLive"], "host": "nowhere"}}
    r = await client.post(f"/v2.1/servers/{uuid}/action", json=body)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Compute host nowhere could not be found."
    for vm_state in ("suspended", "stopped", "error"):
        await instance_obj.save(rt.db, uuid, {"vm_state": vm_state})
        r = await client.post(f"/v2.1/servers/{uuid}/action", json=LIVE_21)
        assert r.status_code == 409, r.text
        assert f"while it is in vm_state {vm_state}" in r.json()["conflictingRequest"]["message"]
    await instance_obj.save(rt.db, uuid, {"vm_state": "active", "task_state": "migrating"})
    r = await client.post(f"/v2.1/servers/{uuid}/action", json=LIVE_21)
    assert r.status_code == 409 and "task_state migrating" in r.text
    r = await client.post("/v2.1/servers/00000000-0000-0000-0000-000000000009/action", json=LIVE_21)
    assert r.status_code == 404
    await instance_obj.save(rt.db, uuid, {"task_state": None})
    assert await _state(client, uuid) == ("ACTIVE", None)


async def test_a_migrating_server_shows_migrating(client, rt):
    uuid = await _active(rt, task_state="migrating")
    assert await _state(client, uuid) == ("MIGRATING", "migrating")
    paused = await _active(rt, vm_state="paused", task_state="migrating")
    assert await _state(client, paused) == ("PAUSED", "migrating")


async def test_abort_and_force_complete_by_microversion_and_state(client, rt):
    uuid = await _active(rt)
    done = await _migration(rt, uuid, status="completed", kind="live-migration")
    base = f"/v2.1/servers/{uuid}/migrations/{done['id']}"
    force = {"force_complete": None}
    # before 2.22 / 2.24 the routes are not there
    assert (await client.post(f"{base}/action", json=force, headers=version("2.21"))).status_code == 404
    assert (await client.delete(base, headers=version("2.23"))).status_code == 404
    # the server is not migrating: 409
    r = await client.post(f"{base}/action", json=force, headers=version("2.22"))
    assert r.status_code == 409 and "task_state None" in r.text
    assert (await client.delete(base, headers=version("2.24"))).status_code == 409
    # migrating, but the migration is not running (completed) or not there
    await instance_obj.save(rt.db, uuid, {"task_state": "migrating"})
    r = await client.post(f"{base}/action", json=force, headers=version("2.22"))
    assert r.status_code == 400
    assert r.json()["badRequest"]["message"] == (
        f"Migration {done['id']} state of instance {uuid} is completed. Cannot force complete while the "
        "migration is in this state.")
    r = await client.delete(base, headers=version("2.24"))
    assert r.status_code == 400 and "Cannot abort live migration" in r.text
    r = await client.post(f"/v2.1/servers/{uuid}/migrations/424242/action", json=force, headers=version("2.22"))
    assert r.status_code == 400 and "Migration 424242 not found for instance" in r.text
    r = await client.delete(f"/v2.1/servers/{uuid}/migrations/abc", headers=version("2.24"))
    assert r.status_code == 404 and "Migration abc not found for instance" in r.text
    # 2.24 aborts only a running one; a queued one is a 400 until 2.65
    queued = await _migration(rt, uuid, status="queued", kind="live-migration")
    r = await client.delete(f"/v2.1/servers/{uuid}/migrations/{queued['id']}", headers=version("2.24"))
    assert r.status_code == 400 and "is queued" in r.text
    # the member may not
    r = await client.delete(base, headers=version("2.24", member()))
    assert r.status_code == 403
