"""No operation is stuck because its request to the compute host was lost (a broker restart drops
casts): after ``rpc_response_timeout`` with nothing under way on the host, the host recovers it as
it would after its own restart (``nefos.host.compute.deadlines.finish_lost_operations``) — a reboot,
stop, start or unshelve is done, a snapshot is given up (its image deleted, its action failed), a
build is ERROR with its claim released, a resize confirm is confirmed by its source host. Each
once with a short ``rpc_response_timeout``, once with the shipped defaults (the request's age
backdated in the database instead); an operation under way on the host is never touched."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select, update

from nefos.host.compute import deadlines
from nefos.context import admin_context
from nefos.db.models import Allocation, Image, Instance, InstanceAction, utcnow
from nefos.model import states
from tests.compute.conftest import eventually
from tests.clouds import ADMIN, DEMO_PROJECT, member, start_cloud, stop_cloud
from tests.servers.test_build_hand_off import Link

MEMBER = member()
TUNED = {"rpc_response_timeout": 3.0}


@pytest.fixture(params=["tuned", "defaults"])
async def cloud(request, tmp_path):
    """Two fake hosts; ``tuned``: lost requests are looked for every second, after 2 s."""
    harness = await start_cloud(tmp_path, fake_hosts=2, **(TUNED if request.param == "tuned" else {}))
    harness.tuned = request.param == "tuned"
    yield harness
    await stop_cloud(harness)


async def _boot_active(cloud) -> str:
    net = await cloud.make_network(shared=True)
    server_id = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=MEMBER))["server"]["id"]
    await cloud.wait_status(server_id, "ACTIVE")
    return server_id


async def _lose(cloud, request) -> None:
    """Run ``request()`` while every cast to a compute host is dropped; return once one was."""
    link = Link(cloud.rt.bus, ("compute",))
    link.lossy = True
    await request()
    await eventually(lambda: _true(link.dropped >= 1), timeout=15)
    link.lossy = False


async def _true(value: bool) -> bool:
    return value


async def _age(cloud, server_id: str) -> None:
    """With the shipped defaults: the request is older than rpc_response_timeout (no waiting a
    minute), and the hosts look for lost requests now (not at their next periodic check)."""
    if cloud.tuned:
        return
    async with cloud.rt.db.transaction() as s:
        await s.execute(update(Instance).where(Instance.uuid == server_id).values(
            updated_at=utcnow() - dt.timedelta(seconds=2 * cloud.rt.cfg.rpc_response_timeout)))
    for host in cloud.hosts:
        await deadlines.reap_stuck_instances(cloud.compute_manager(host))


async def _action(cloud, server_id: str, name: str) -> dict:
    """The newest ``name`` action of the server, with its events."""
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
    request_id = next(a["request_id"] for a in r.json()["instanceActions"] if a["action"] == name)
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{request_id}",
                                headers={**ADMIN, "X-OpenStack-Nova-API-Version": "2.51"})
    assert r.status_code == 200, r.text
    return r.json()["instanceAction"]


async def _events(cloud, server_id: str, name: str) -> dict[str, str]:
    return {e["event"]: e["result"] for e in (await _action(cloud, server_id, name))["events"]}


async def _succeeded(cloud, server_id: str, action: str, event: str) -> None:
    """The host's step of the user's own ``action`` ran, and nothing in it failed."""
    events = await _events(cloud, server_id, action)
    assert events.get(event) == "Success" and "Error" not in events.values(), events


def _guest_power(cloud, server_id: str) -> int | None:
    for host in cloud.hosts:
        guest = cloud.driver(host).guests.get(server_id)
        if guest is not None:
            return guest.power_state
    return None


async def _allocations(cloud) -> list[str]:
    async with cloud.rt.db.reader() as s:
        return sorted((await s.execute(select(Allocation.consumer_uuid))).scalars())


async def _image_status(cloud, image_id: str) -> str | None:
    async with cloud.rt.db.reader() as s:
        return (await s.execute(select(Image.status).where(Image.id == image_id))).scalar_one_or_none()


# Each lost operation: what comes before it, the request that is lost, what shows it was recovered.
async def _lost_power_action(cloud, server_id, body: dict, action: str, status: str, power: int):
    await _lose(cloud, lambda: cloud.action(server_id, body, headers=MEMBER))
    assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] is not None
    await _age(cloud, server_id)
    await cloud.wait_status(server_id, status)
    await _succeeded(cloud, server_id, action, f"compute_{action}_instance")
    assert _guest_power(cloud, server_id) == power


async def _reboot(cloud, server_id):
    await _lost_power_action(cloud, server_id, {"reboot": {"type": "SOFT"}}, "reboot", "ACTIVE", states.RUNNING)


async def _stop(cloud, server_id):
    await _lost_power_action(cloud, server_id, {"os-stop": None}, "stop", "SHUTOFF", states.SHUTDOWN)


async def _start(cloud, server_id):
    await cloud.action(server_id, {"os-stop": None}, headers=MEMBER)
    await cloud.wait_status(server_id, "SHUTOFF")
    await _lost_power_action(cloud, server_id, {"os-start": None}, "start", "ACTIVE", states.RUNNING)


async def _snapshot(cloud, server_id):
    answer = []

    async def snapshot():
        answer.append(await cloud.action(server_id, {"createImage": {"name": "snap"}}, headers=MEMBER))

    await _lose(cloud, snapshot)
    image_id = answer[0].headers["Location"].rsplit("/", 1)[-1] if "Location" in answer[0].headers \
        else answer[0].json()["image_id"]
    assert await _image_status(cloud, image_id) == "queued"
    await _age(cloud, server_id)
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert "fault" not in server  # nothing happened to the server: the request was only dropped
    action = await _action(cloud, server_id, "createImage")
    assert action["message"] == "Error"
    assert [(e["event"], e["result"]) for e in action["events"]] == [("compute_lost_request", "Error")]
    await eventually(lambda: _gone(cloud, image_id), timeout=15)


async def _gone(cloud, image_id: str) -> bool:
    return await _image_status(cloud, image_id) in (None, "deleted")


async def _unshelve(cloud, server_id):
    await cloud.action(server_id, {"shelve": None}, headers=MEMBER)
    await cloud.wait_status(server_id, "SHELVED_OFFLOADED")
    await _lose(cloud, lambda: cloud.action(server_id, {"unshelve": None}, headers=MEMBER))
    server = await cloud.server(server_id)
    assert (server["OS-EXT-STS:task_state"], _guest_power(cloud, server_id)) == ("unshelving", None)
    await _age(cloud, server_id)
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert _guest_power(cloud, server_id) == states.RUNNING
    assert server["OS-EXT-SRV-ATTR:host"] in cloud.hosts
    assert await _allocations(cloud) == [server_id]


async def _confirm(cloud, server_id):
    await cloud.action(server_id, {"resize": {"flavorRef": "2"}}, headers=MEMBER)
    await cloud.wait_status(server_id, "VERIFY_RESIZE")
    assert len(await _allocations(cloud)) == 2  # the source's and the destination's
    await _lose(cloud, lambda: cloud.action(server_id, {"confirmResize": None}, expect=204, headers=MEMBER))
    assert (await cloud.server(server_id))["status"] == "VERIFY_RESIZE"
    await _age(cloud, server_id)
    server = await cloud.wait_status(server_id, "ACTIVE")
    assert server["flavor"]["id"] == "2"
    await eventually(lambda: _only_claim(cloud, server_id), timeout=15)
    assert all(not cloud.driver(h).resize_backups for h in cloud.hosts)  # the kept guest is gone
    await _succeeded(cloud, server_id, "confirmResize", "compute_confirm_resize")
    usage = await cloud.quota_usage(DEMO_PROJECT)
    assert (usage["instances"], usage["cores"], usage["ram"]) == (1, 1, 2048), usage


async def _only_claim(cloud, server_id: str) -> bool:
    return await _allocations(cloud) == [server_id]


@pytest.mark.parametrize("operation", [_reboot, _stop, _start, _snapshot, _unshelve, _confirm],
                         ids=["reboot", "stop", "start", "snapshot", "unshelve", "confirm-resize"])
async def test_an_operation_whose_cast_was_lost_is_recovered(cloud, operation):
    server_id = await _boot_active(cloud)
    await operation(cloud, server_id)
    # Once recovered, the server takes requests again, and a delete leaves nothing.
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=MEMBER)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(server_id)
    assert await _allocations(cloud) == []


async def test_a_build_whose_cast_was_lost_is_error_and_its_claim_released(cloud):
    net = await cloud.make_network(shared=True)
    answer = []

    async def boot():
        answer.append((await cloud.boot(networks=[{"uuid": net["id"]}], headers=MEMBER))["server"]["id"])

    await _lose(cloud, boot)
    (server_id,) = answer
    server = await cloud.server(server_id)
    assert (server["status"], server["OS-EXT-SRV-ATTR:host"] in cloud.hosts) == ("BUILD", True), server
    assert len(await _allocations(cloud)) == 1  # the scheduler's claim on the host
    await _age(cloud, server_id)
    server = await cloud.wait_status(server_id, "ERROR")
    assert "never reached compute host" in server["fault"]["message"], server["fault"]
    assert await _allocations(cloud) == []
    assert await cloud.ports(device_id=server_id) == []
    usage = await cloud.hypervisor_usage()
    assert (usage["running_vms"], usage["vcpus_used"]) == (0, 0), usage
    assert (await _action(cloud, server_id, "create"))["message"] == "Error"
    # An ERROR server holds its quota until it is deleted, as in Nova; then nothing is left.
    r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=MEMBER)
    assert r.status_code == 204, r.text
    await cloud.wait_gone(server_id)
    usage = await cloud.quota_usage(DEMO_PROJECT)
    assert (usage["instances"], usage["cores"], usage["ram"]) == (0, 0, 0), usage


async def test_an_operation_under_way_on_the_host_is_left_alone(tmp_path):
    """A stop that holds the instance on its host (a slow hypervisor) for longer than
    rpc_response_timeout is not taken for a lost one; when it is done, nothing else happens."""
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        server_id = await _boot_active(cloud)
        manager = cloud.compute_manager("host-1")
        async with manager.instance_lock(server_id):  # the host's stop is under way
            await cloud.action(server_id, {"os-stop": None}, headers=MEMBER)
            async with cloud.rt.db.transaction() as s:
                await s.execute(update(Instance).where(Instance.uuid == server_id).values(
                    updated_at=utcnow() - dt.timedelta(seconds=2 * cloud.rt.cfg.rpc_response_timeout)))
            assert await deadlines.finish_lost_operations(manager) == []
            assert await deadlines.reap_stuck_instances(manager) == []
            assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] == "powering-off"
        await cloud.wait_status(server_id, "SHUTOFF")  # the stop itself, once it has the instance
        await _succeeded(cloud, server_id, "stop", "compute_stop_instance")
        assert await deadlines.finish_lost_operations(manager) == []
    finally:
        await stop_cloud(cloud)


async def test_a_request_that_arrives_after_its_recovery_changes_nothing(tmp_path):
    """A lost reboot is done by the host; the original cast, arriving late after all, finds the
    task state gone and neither reboots the guest again nor rewrites the action."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, **TUNED)
    try:
        server_id = await _boot_active(cloud)
        await _lose(cloud, lambda: cloud.action(server_id, {"reboot": {"type": "SOFT"}}, headers=MEMBER))
        await cloud.wait_status(server_id, "ACTIVE")
        before = await _action(cloud, server_id, "reboot")
        manager = cloud.compute_manager("host-1")
        ctx = admin_context()
        ctx.request_id = before["request_id"]
        await manager.reboot_instance(ctx, server_id, "SOFT")
        assert await _action(cloud, server_id, "reboot") == before
        async with cloud.rt.db.reader() as s:
            assert (await s.execute(select(func.count()).select_from(Allocation))).scalar_one() == 1
    finally:
        await stop_cloud(cloud)


async def test_a_lost_reboot_overtaken_by_another_is_finished_with_it(cloud):
    """Two reboots accepted, both requests lost: the newer is carried out; the older, overtaken by
    it, is finished as failed rather than left open for ever."""
    server_id = await _boot_active(cloud)
    await _lose(cloud, lambda: cloud.action(server_id, {"reboot": {"type": "SOFT"}}, headers=MEMBER))
    await _lose(cloud, lambda: cloud.action(server_id, {"reboot": {"type": "HARD"}}, headers=MEMBER))
    await _age(cloud, server_id)
    await cloud.wait_status(server_id, "ACTIVE")
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
    reboots = [a for a in r.json()["instanceActions"] if a["action"] == "reboot"]
    assert len(reboots) == 2

    async def finished() -> bool:
        async with cloud.rt.db.reader() as s:
            open_ = (await s.execute(select(func.count()).select_from(InstanceAction).where(
                InstanceAction.instance_uuid == server_id, InstanceAction.action == "reboot",
                InstanceAction.finish_time.is_(None)))).scalar_one()
        return open_ == 0
    await eventually(finished, timeout=15)
    newest, older = reboots  # newest first
    assert older["message"] == "Error"
    await _succeeded(cloud, server_id, "reboot", "compute_reboot_instance")
