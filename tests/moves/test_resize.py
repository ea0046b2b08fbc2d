"""Resize and cold migration through the real HTTP API on the in-process cloud (two fake hosts)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.clouds import ADMIN, DEMO_PROJECT, member, start_cloud, stop_cloud

MEMBER = member()


async def _boot_active(cloud, flavor="1", headers=MEMBER) -> dict:
    await _network(cloud)
    server = (await cloud.boot(flavor=flavor, headers=headers))["server"]
    return await cloud.wait_status(server["id"], "ACTIVE", headers=headers)


async def _network(cloud) -> None:
    if not getattr(cloud, "_resize_net", None):
        cloud._resize_net = await cloud.make_network(shared=True)


async def _host(cloud, server_id: str) -> str:
    return (await cloud.server(server_id, ADMIN))["OS-EXT-SRV-ATTR:host"]


async def _node_usage(cloud) -> dict[str, tuple[int, int, int]]:
    from sqlalchemy import select

    from nefos.db.models import ComputeNode
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(ComputeNode))).scalars().all()
    return {r.host: (r.vcpus_used, r.memory_mb_used, r.running_vms) for r in rows}


async def _allocations(cloud) -> list[tuple[str, int, int]]:
    from sqlalchemy import select

    from nefos.db.models import Allocation
    async with cloud.rt.db.reader() as s:
        return [(a.consumer_uuid, a.vcpus, a.memory_mb)
                for a in (await s.execute(select(Allocation))).scalars().all()]


async def _guests(cloud) -> dict[str, dict]:
    """Every host's live guests and kept (resize) guests."""
    return {h: {"guests": {u: g.memory_mb for u, g in cloud.driver(h).guests.items()},
                "kept": set(cloud.driver(h).resize_backups)} for h in cloud.hosts}


async def _action_names(cloud, server_id: str) -> list[str]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
    assert r.status_code == 200, r.text
    return [a["action"] for a in r.json()["instanceActions"]]


async def _wait_idle(cloud, server_id: str, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        server = await cloud.server(server_id, ADMIN)
        if server["OS-EXT-STS:task_state"] is None:
            return server
        assert time.monotonic() < deadline, server
        await asyncio.sleep(0.02)


async def test_resize_confirm_moves_the_server_and_its_claims(cloud):
    server = await _boot_active(cloud)
    source = await _host(cloud, server["id"])
    q0 = await cloud.quota_usage(DEMO_PROJECT)
    assert (q0["cores"], q0["ram"]) == (1, 512)
    await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, headers=MEMBER)
    resized = await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
    dest = await _host(cloud, server["id"])
    assert dest != source
    assert resized["flavor"]["id"] == "2"
    # Both hosts hold a claim until the confirm: the source the old flavor, the destination the new.
    usage = await _node_usage(cloud)
    assert usage[source][:2] == (1, 512) and usage[dest][:2] == (1, 2048)
    assert (await cloud.quota_usage(DEMO_PROJECT))["ram"] == 2048
    guests = await _guests(cloud)
    assert server["id"] in guests[source]["kept"] and guests[dest]["guests"][server["id"]] == 2048
    ports = await cloud.ports(device_id=server["id"])
    assert {p["binding:host_id"] for p in ports} == {dest}

    await cloud.action(server["id"], {"confirmResize": None}, expect=204, headers=MEMBER)
    done = await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)
    assert done["flavor"]["id"] == "2"
    usage = await _node_usage(cloud)
    assert usage[source] == (0, 0, 0) and usage[dest] == (1, 2048, 1)
    assert await _allocations(cloud) == [(server["id"], 1, 2048)]
    guests = await _guests(cloud)
    assert not guests[source]["kept"] and server["id"] not in guests[source]["guests"]
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["instances"], q["cores"], q["ram"]) == (1, 1, 2048)
    assert (await _action_names(cloud, server["id"]))[:2] == ["confirmResize", "resize"]
    events = [n["event_type"] for n in cloud.notifications]
    for name in ("instance.resize_prep.start", "instance.resize.start", "instance.resize.end",
                 "instance.resize_finish.end", "instance.resize_confirm.start", "instance.resize_confirm.end"):
        assert name in events, name

    await cloud.compute.delete(f"/v2.1/servers/{server['id']}", headers=MEMBER)
    await cloud.wait_gone(server["id"])
    assert await _allocations(cloud) == []
    assert all(v == (0, 0, 0) for v in (await _node_usage(cloud)).values())


async def test_resize_revert_goes_back(cloud):
    server = await _boot_active(cloud)
    source = await _host(cloud, server["id"])
    await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, headers=MEMBER)
    await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
    await cloud.action(server["id"], {"revertResize": None}, headers=MEMBER)
    back = await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)
    assert back["flavor"]["id"] == "1"
    assert await _host(cloud, server["id"]) == source
    assert await _allocations(cloud) == [(server["id"], 1, 512)]
    usage = await _node_usage(cloud)
    assert usage[source] == (1, 512, 1) and sum(v[1] for v in usage.values()) == 512
    guests = await _guests(cloud)
    assert guests[source]["guests"] == {server["id"]: 512}
    assert all(not g["kept"] for g in guests.values())
    assert sum(len(g["guests"]) for g in guests.values()) == 1
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["cores"], q["ram"]) == (1, 512)
    ports = await cloud.ports(device_id=server["id"])
    assert {p["binding:host_id"] for p in ports} == {source}
    assert {p["status"] for p in ports} == {"ACTIVE"}
    assert (await _action_names(cloud, server["id"]))[:2] == ["revertResize", "resize"]


async def test_migrate_is_admin_and_moves_to_the_other_host(cloud):
    server = await _boot_active(cloud)
    source = await _host(cloud, server["id"])
    await cloud.action(server["id"], {"migrate": None}, expect=403, headers=MEMBER)
    await cloud.action(server["id"], {"migrate": None})
    await cloud.wait_status(server["id"], "VERIFY_RESIZE")
    await cloud.action(server["id"], {"confirmResize": None}, expect=204)
    done = await cloud.wait_status(server["id"], "ACTIVE")
    assert await _host(cloud, done["id"]) != source and done["flavor"]["id"] == "1"
    assert await _allocations(cloud) == [(server["id"], 1, 512)]
    assert "migrate" in await _action_names(cloud, server["id"])
    # 2.56: to a named host; its own host is a 400, as an unknown one.
    await cloud.compute.post(f"/v2.1/servers/{server['id']}/action", json={"migrate": {"host": source}},
                             headers={"OpenStack-API-Version": "compute 2.56"})
    await cloud.wait_status(server["id"], "VERIFY_RESIZE")
    assert await _host(cloud, server["id"]) == source
    await cloud.action(server["id"], {"revertResize": None})
    await cloud.wait_status(server["id"], "ACTIVE")
    headers = {"OpenStack-API-Version": "compute 2.56"}
    for host in (await _host(cloud, done["id"]), "nowhere"):
        r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action", json={"migrate": {"host": host}},
                                     headers=headers)
        assert r.status_code == 400, r.text
    r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action", json={"migrate": {"host": 1}},
                                 headers=headers)
    assert r.status_code == 400, r.text
    # Before 2.56 the body is not looked at (as Nova): {} is a migration, a host is ignored.
    r = await cloud.compute.post(f"/v2.1/servers/{server['id']}/action", json={"migrate": {"host": "nowhere"}})
    assert r.status_code == 202, r.text
    await cloud.wait_status(server["id"], "VERIFY_RESIZE")
    assert await _host(cloud, server["id"]) == source


async def test_stopped_server_stays_stopped(cloud):
    server = await _boot_active(cloud, flavor="84")  # m1.micro: 192 MB, no disk (as Tempest's alt flavor)
    await cloud.action(server["id"], {"os-stop": None}, headers=MEMBER)
    await cloud.wait_status(server["id"], "SHUTOFF", headers=MEMBER)
    await cloud.action(server["id"], {"resize": {"flavorRef": "42"}}, headers=MEMBER)  # m1.nano: 128 MB
    resized = await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
    assert resized["OS-EXT-STS:power_state"] == 4
    assert (await cloud.quota_usage(DEMO_PROJECT))["ram"] == 192  # a downsize holds the old RAM until confirmed
    await cloud.action(server["id"], {"confirmResize": None}, expect=204, headers=MEMBER)
    done = await cloud.wait_status(server["id"], "SHUTOFF", headers=MEMBER)
    assert done["flavor"]["id"] == "42"
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["cores"], q["ram"]) == (1, 128)
    await cloud.action(server["id"], {"os-start": None}, headers=MEMBER)
    await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)

    # Revert of a stopped server: stopped again, on its flavor.
    await cloud.action(server["id"], {"os-stop": None}, headers=MEMBER)
    await cloud.wait_status(server["id"], "SHUTOFF", headers=MEMBER)
    await cloud.action(server["id"], {"resize": {"flavorRef": "84"}}, headers=MEMBER)
    await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
    assert (await cloud.quota_usage(DEMO_PROJECT))["ram"] == 192
    await cloud.action(server["id"], {"revertResize": None}, headers=MEMBER)
    back = await cloud.wait_status(server["id"], "SHUTOFF", headers=MEMBER)
    assert back["flavor"]["id"] == "42"
    assert (await cloud.quota_usage(DEMO_PROJECT))["ram"] == 128
    assert await _allocations(cloud) == [(server["id"], 1, 128)]


async def test_bad_inputs(cloud):
    server = await _boot_active(cloud)
    sid = server["id"]
    r = await cloud.compute.post("/v2.1/servers/00000000-0000-0000-0000-000000000000/action",
                                 json={"resize": {"flavorRef": "2"}}, headers=MEMBER)
    assert r.status_code == 404, r.text
    for body in ({"resize": {"flavorRef": ""}}, {"resize": {}}, {"resize": {"flavorRef": "2", "x": 1}},
                 {"resize": {"flavorRef": "nope"}}, {"resize": {"flavorRef": "1"}},  # same flavor
                 {"resize": {"flavorRef": "42"}},  # no disk for a server with one
                 {"resize": {"flavorRef": "2", "OS-DCF:diskConfig": "BAD"}}):
        await cloud.action(sid, body, expect=400, headers=MEMBER)
    # Confirm / revert of a server that was not resized: 409 (its vm_state).
    await cloud.action(sid, {"confirmResize": None}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"revertResize": None}, expect=409, headers=MEMBER)
    # Locked: 409 for its owner.
    await cloud.action(sid, {"lock": None})
    await cloud.action(sid, {"resize": {"flavorRef": "2"}}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"unlock": None})
    # Suspended: 409, for a resize and a migration.
    await cloud.action(sid, {"suspend": None}, headers=MEMBER)
    await cloud.wait_status(sid, "SUSPENDED", headers=MEMBER)
    await cloud.action(sid, {"resize": {"flavorRef": "2"}}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"migrate": None}, expect=409)
    await cloud.action(sid, {"resume": None}, headers=MEMBER)
    await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    # Over quota (403): a flavor with more cores than the project may have.
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {"name": "huge", "ram": 512, "vcpus": 100,
                                                                   "disk": 1, "id": "huge"}}, headers=ADMIN)
    assert r.status_code == 200, r.text
    r = await cloud.action(sid, {"resize": {"flavorRef": "huge"}}, expect=403, headers=MEMBER)
    assert "cores" in r.text
    # A flavor no host has room for: 400 (no valid host), and nothing held.
    r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {"name": "vast", "ram": 512, "vcpus": 1,
                                                                   "disk": 10 ** 6, "id": "vast"}}, headers=ADMIN)
    assert r.status_code == 200, r.text
    r = await cloud.action(sid, {"resize": {"flavorRef": "vast"}}, expect=400, headers=MEMBER)
    assert "No valid host" in r.text
    after = await cloud.server(sid, MEMBER)
    assert (after["status"], after["OS-EXT-STS:task_state"]) == ("ACTIVE", None)
    assert await _allocations(cloud) == [(sid, 1, 512)]
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["cores"], q["ram"]) == (1, 512)
    # While resizing: 409 for another resize; confirm of a migration not finished yet: 409.
    await cloud.action(sid, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
    await cloud.wait_status(sid, "VERIFY_RESIZE", headers=MEMBER)
    await cloud.action(sid, {"resize": {"flavorRef": "3"}}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"os-stop": None}, expect=409, headers=MEMBER)


async def test_one_host_needs_allow_resize_to_same_host(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        server = await _boot_active(cloud)
        r = await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, expect=400, headers=MEMBER)
        assert "No valid host" in r.text
        assert (await cloud.server(server["id"], MEMBER))["status"] == "ACTIVE"
        cloud.rt.cfg.allow_resize_to_same_host = True
        await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, headers=MEMBER)
        await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
        usage = await _node_usage(cloud)
        assert usage["host-1"][:2] == (2, 2560)  # both flavors claimed on the one host
        await cloud.action(server["id"], {"revertResize": None}, headers=MEMBER)
        await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)
        assert (await _node_usage(cloud))["host-1"] == (1, 512, 1)
        guests = await _guests(cloud)
        assert guests["host-1"] == {"guests": {server["id"]: 512}, "kept": set()}
        await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, headers=MEMBER)
        await cloud.wait_status(server["id"], "VERIFY_RESIZE", headers=MEMBER)
        await cloud.action(server["id"], {"confirmResize": None}, expect=204, headers=MEMBER)
        await cloud.wait_status(server["id"], "ACTIVE", headers=MEMBER)
        assert (await _node_usage(cloud))["host-1"] == (1, 2048, 1)
        assert (await _guests(cloud))["host-1"] == {"guests": {server["id"]: 2048}, "kept": set()}
        # A migration never stays on the host: 400 with one host.
        await cloud.action(server["id"], {"migrate": None}, expect=400)
    finally:
        await stop_cloud(cloud)


async def _assert_nothing_left(cloud, server_id: str) -> None:
    await cloud.wait_gone(server_id)
    deadline = time.monotonic() + 5
    while True:
        guests = await _guests(cloud)
        left = (await _allocations(cloud), [g for g in guests.values() if g["guests"] or g["kept"]],
                await cloud.ports(device_id=server_id))
        if left == ([], [], []):
            break
        assert time.monotonic() < deadline, left
        await asyncio.sleep(0.05)
    assert all(v == (0, 0, 0) for v in (await _node_usage(cloud)).values())
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["instances"], q["cores"], q["ram"]) == (0, 0, 0)


@pytest.mark.parametrize("step", ["resize_prep", "resize_migrating", "resize_migrated", "resize_finish",
                                  "verify_resize", "resize_reverting", "confirming"])
async def test_delete_during_each_step_leaks_nothing(tmp_path, step):
    cloud = await start_cloud(tmp_path, fake_hosts=2)
    try:
        server = await _boot_active(cloud)
        sid = server["id"]
        if step in ("verify_resize", "resize_reverting", "confirming"):
            await cloud.action(sid, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
            await cloud.wait_status(sid, "VERIFY_RESIZE", headers=MEMBER)
            if step == "resize_reverting":
                await cloud.action(sid, {"revertResize": None}, headers=MEMBER)
            elif step == "confirming":
                await cloud.action(sid, {"confirmResize": None}, expect=204, headers=MEMBER)
        else:
            # Hold the server in ``step``: the method after it waits until the delete is in.
            from nefos.host.compute import resize
            gate = asyncio.Event()
            following = {"resize_prep": "resize_instance", "resize_migrating": "migrate_disk_and_power_off",
                         "resize_migrated": "finish_resize", "resize_finish": "finish_migration"}[step]
            if following in ("migrate_disk_and_power_off", "finish_migration"):
                for host in cloud.hosts:
                    driver = cloud.driver(host)
                    original = getattr(driver, following)

                    async def held(*a, _original=original, **kw):
                        await gate.wait()
                        return await _original(*a, **kw)
                    setattr(driver, following, held)
            else:
                original = getattr(resize, following)

                async def held(*a, _original=original, **kw):
                    await gate.wait()
                    return await _original(*a, **kw)
                resize.__dict__[following] = held
            try:
                await cloud.action(sid, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
                deadline = time.monotonic() + 10
                while (await cloud.server(sid, ADMIN))["OS-EXT-STS:task_state"] != step:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=MEMBER)
                assert r.status_code == 204, r.text
                await asyncio.sleep(0.1)
            finally:
                gate.set()
                if following not in ("migrate_disk_and_power_off", "finish_migration"):
                    resize.__dict__[following] = original
            await _assert_nothing_left(cloud, sid)
            return
        r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=MEMBER)
        assert r.status_code == 204, r.text
        await _assert_nothing_left(cloud, sid)
    finally:
        await stop_cloud(cloud)


async def test_a_driver_that_cannot_resize_answers_409_and_holds_nothing(cloud):
    """The libvirt driver has no resize yet (``supports_resize`` False): 409 before anything moves."""
    server = await _boot_active(cloud)
    source = await _host(cloud, server["id"])
    cloud.driver(source).supports_resize = False
    try:
        r = await cloud.action(server["id"], {"resize": {"flavorRef": "2"}}, expect=409, headers=MEMBER)
        assert "cannot resize or migrate" in r.text
        await cloud.action(server["id"], {"migrate": None}, expect=409)
    finally:
        del cloud.driver(source).supports_resize
    after = await cloud.server(server["id"], MEMBER)
    assert (after["status"], after["OS-EXT-STS:task_state"], after["flavor"]["id"]) == ("ACTIVE", None, "1")
    assert await _allocations(cloud) == [(server["id"], 1, 512)]
    q = await cloud.quota_usage(DEMO_PROJECT)
    assert (q["cores"], q["ram"]) == (1, 512)
    actions = await cloud.compute.get(f"/v2.1/servers/{server['id']}/os-instance-actions", headers=ADMIN)
    assert actions.json()["instanceActions"][0]["message"] == "Error"
