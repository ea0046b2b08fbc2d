"""Resizes and cold migrations on the in-process cloud (two fake hosts) are recorded as Nova records
them, and os-migrations lists them: each status at the step Nova sets it, the hosts, the flavors."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select

from nefos.host.compute import resize
from nefos.db.models import Flavor, Migration
from tests.clouds import ADMIN, DEMO_PROJECT, member

MEMBER = member()
V280 = {**ADMIN, "OpenStack-API-Version": "compute 2.80"}


async def _boot_active(cloud) -> dict:
    if not getattr(cloud, "_records_net", None):
        cloud._records_net = await cloud.make_network(shared=True)
    server = (await cloud.boot(flavor="1", headers=MEMBER))["server"]
    return await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)


async def _status(cloud, server_id: str) -> str:
    async with cloud.rt.db.reader() as s:
        return (await s.execute(select(Migration.status).where(Migration.instance_uuid == server_id)
                                .order_by(Migration.id.desc()))).scalars().first()


async def _listed(cloud, server_id: str) -> list[dict]:
    r = await cloud.compute.get("/v2.1/os-migrations", params={"instance_uuid": server_id}, headers=V280)
    assert r.status_code == 200, r.text
    return r.json()["migrations"]


async def _wait_listed_status(cloud, server_id: str, status: str, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        listed = await _listed(cloud, server_id)
        if listed and listed[0]["status"] == status:
            return listed[0]
        assert time.monotonic() < deadline, listed
        await asyncio.sleep(0.02)


async def _flavor_db_id(cloud, flavorid: str) -> int:
    async with cloud.rt.db.reader() as s:
        return (await s.execute(select(Flavor.id).where(Flavor.flavorid == flavorid))).scalar_one()


def _record_statuses(cloud, seen: list[tuple[str, str]], server_id: str):
    """Wrap the step methods to note the migration's status each one starts in; returns an undo."""
    undo = []

    def wrap(owner, name, is_dict=False):
        original = owner[name] if is_dict else getattr(owner, name)

        async def noted(*a, **kw):
            seen.append((name, await _status(cloud, server_id)))
            return await original(*a, **kw)
        if is_dict:
            owner[name] = noted
            undo.append(lambda: owner.__setitem__(name, original))
        else:
            setattr(owner, name, noted)
            undo.append(lambda: delattr(owner, name))
    wrap(resize.__dict__, "resize_instance", is_dict=True)
    for host in cloud.hosts:
        for method in ("migrate_disk_and_power_off", "finish_migration", "finish_revert_migration"):
            wrap(cloud.driver(host), method)
    return lambda: [u() for u in reversed(undo)]


async def test_a_resize_is_listed_with_each_status_nova_sets(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    source = (await cloud.server(sid, ADMIN))["OS-EXT-SRV-ATTR:host"]
    seen: list[tuple[str, str]] = []
    undo = _record_statuses(cloud, seen, sid)
    try:
        await cloud.action(sid, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
        await cloud.wait_status(sid, "VERIFY_RESIZE", headers=MEMBER)
    finally:
        undo()
    # The destination chosen before the source starts; the guest moves while "migrating"; the
    # destination finishes a "post-migrating" one; then "finished" (VERIFY_RESIZE).
    assert seen == [("resize_instance", "pre-migrating"), ("migrate_disk_and_power_off", "migrating"),
                    ("finish_migration", "post-migrating")]
    resized = await cloud.server(sid, ADMIN)
    dest = resized["OS-EXT-SRV-ATTR:host"]
    # Nova launches the server anew on the destination: its usage starts again there.
    assert resized["OS-SRV-USG:launched_at"] > server["OS-SRV-USG:launched_at"]
    r = await cloud.compute.get(f"/v2.1/os-simple-tenant-usage/{DEMO_PROJECT}", headers=MEMBER)
    (usage,) = [u for u in r.json()["tenant_usage"]["server_usages"] if u["instance_id"] == sid]
    assert (usage["started_at"], usage["flavor"], usage["state"]) == (
        resized["OS-SRV-USG:launched_at"], "m1.small", "resized")
    (listed,) = await _listed(cloud, sid)
    assert listed["status"] == "finished" and listed["migration_type"] == "resize"
    assert (listed["source_compute"], listed["dest_compute"]) == (source, dest)
    assert listed["source_node"] and listed["dest_node"] and listed["dest_node"] != listed["source_node"]
    assert (listed["old_instance_type_id"], listed["new_instance_type_id"]) == (
        await _flavor_db_id(cloud, "1"), await _flavor_db_id(cloud, "2"))
    assert (listed["project_id"], listed["user_id"]) == (DEMO_PROJECT, "u" * 32)
    assert listed["updated_at"] and listed["created_at"] <= listed["updated_at"]
    # Filters on the hosts: host matches either end, source_compute only the source.
    for params, found in (({"host": dest}, True), ({"source_compute": source}, True),
                          ({"source_compute": dest}, False), ({"migration_type": "migration"}, False)):
        r = await cloud.compute.get("/v2.1/os-migrations", params={**params, "instance_uuid": sid}, headers=V280)
        assert bool(r.json()["migrations"]) is found, params
    r = await cloud.compute.get(f"/v2.1/servers/{sid}/migrations", headers=V280)
    assert r.json() == {"migrations": []}  # only live migrations in progress, as Nova

    await cloud.action(sid, {"confirmResize": None}, expect=204, headers=MEMBER)
    await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    await _wait_listed_status(cloud, sid, "confirmed")


async def test_a_cold_migration_reverted_is_listed_as_reverted(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    await cloud.action(sid, {"migrate": None})
    await cloud.wait_status(sid, "VERIFY_RESIZE")
    flavor_id = await _flavor_db_id(cloud, "1")
    (listed,) = await _listed(cloud, sid)
    assert (listed["migration_type"], listed["status"]) == ("migration", "finished")
    assert listed["old_instance_type_id"] == listed["new_instance_type_id"] == flavor_id
    assert listed["project_id"] != DEMO_PROJECT  # the admin asked: Nova records the requester's project
    seen: list[tuple[str, str]] = []
    undo = _record_statuses(cloud, seen, sid)
    try:
        await cloud.action(sid, {"revertResize": None})
        await cloud.wait_status(sid, "ACTIVE")
    finally:
        undo()
    assert seen == [("finish_revert_migration", "reverting")]
    await _wait_listed_status(cloud, sid, "reverted")
    # A second migration is listed first from 2.59 (newest first), last before.
    await cloud.action(sid, {"migrate": None})
    await cloud.wait_status(sid, "VERIFY_RESIZE")
    r = await cloud.compute.get("/v2.1/os-migrations", params={"instance_uuid": sid}, headers=ADMIN)
    assert [m["status"] for m in r.json()["migrations"]] == ["reverted", "finished"]
    r = await cloud.compute.get("/v2.1/os-migrations", params={"instance_uuid": sid}, headers=V280)
    assert [m["status"] for m in r.json()["migrations"]] == ["finished", "reverted"]
    # A deleted server's migrations go with it, as Nova's instance_destroy.
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=MEMBER)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(sid)
    assert await _listed(cloud, sid) == []


async def test_a_failed_finish_errors_the_migration(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    undo = []
    for host in cloud.hosts:
        driver = cloud.driver(host)

        async def broken(*a, **kw):
            raise RuntimeError("finish failed")
        driver.finish_migration = broken
        undo.append(driver)
    try:
        await cloud.action(sid, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
        await cloud.wait_status(sid, "ERROR", headers=MEMBER)
    finally:
        for driver in undo:
            del driver.finish_migration
    await _wait_listed_status(cloud, sid, "error")


async def test_no_valid_host_errors_the_migration(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    source = (await cloud.server(sid, ADMIN))["OS-EXT-SRV-ATTR:host"]
    (other,) = set(cloud.hosts) - {source}
    r = await cloud.compute.put("/v2.1/os-services/disable", json={"host": other, "binary": "nova-compute"},
                                headers=ADMIN)
    assert r.status_code == 200, r.text
    await cloud.action(sid, {"resize": {"flavorRef": "2"}}, expect=400, headers=MEMBER)
    (listed,) = await _listed(cloud, sid)
    assert (listed["status"], listed["dest_compute"]) == ("error", None)
    assert (await cloud.server(sid, MEMBER))["status"] == "ACTIVE"
