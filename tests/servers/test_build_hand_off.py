"""No accepted build is stranded: the API records each build before it tells the conductor, so a
build is made however the hand-off fails — the conductor down when the API casts (taken when a
conductor starts), the cast lost on the way (taken after build_hand_off_timeout), or the
conductor dying midway (taken again when its lease runs out) — and exactly once."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import time

import pytest
from sqlalchemy import func, select, update

from nefos import exceptions
from nefos.db.models import BuildRequest, utcnow
from tests.clouds import ADMIN, start_cloud, stop_cloud


class Link:
    """The bus to ``topics``: working, refusing every cast and call (``down``: what the RabbitMQ
    bus raises when the broker is unreachable), or dropping casts silently (``lossy``)."""

    def __init__(self, bus, topics: tuple[str, ...]):
        self.down = self.lossy = False
        self.topics = topics
        self.dropped = 0
        for name in ("cast", "call"):
            setattr(bus, name, self._wrap(name, getattr(bus, name)))

    def _wrap(self, name, original):
        async def send(ctx, topic, method, *args, **kwargs):
            if topic in self.topics and self.down:
                raise exceptions.ServiceUnavailable(f"timed out sending to {topic}.{method}")
            if topic in self.topics and self.lossy and name == "cast":
                self.dropped += 1
                return None
            return await original(ctx, topic, method, *args, **kwargs)
        return send


def _component(cloud, name: str):
    return next(c for c in cloud.cloud.components if c.name == name)


async def _outbox(cloud) -> int:
    async with cloud.rt.db.reader() as s:
        return (await s.execute(select(func.count()).select_from(BuildRequest))).scalar_one()


async def _boot(cloud) -> str:
    net = await cloud.make_network()
    r = await cloud.compute.post("/v2.1/servers", json={"server": {
        "name": "vm", "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": net["id"]}]}}, headers=ADMIN)
    assert r.status_code == 202, r.text
    return r.json()["server"]["id"]


async def _still_waiting(cloud, server_id: str, seconds: float) -> None:
    """Nothing builds it meanwhile (the conductor really is out of the way)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        server = await cloud.server(server_id)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("BUILD", None), server
        await asyncio.sleep(0.05)


async def test_a_build_the_conductor_never_got_is_made_when_a_conductor_starts(tmp_path):
    """With the shipped defaults: the conductor is down when the API accepts the build; it is built
    as soon as a conductor is back, and the quota it holds is the one server's."""
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        link = Link(cloud.rt.bus, ("conductor",))
        conductor = _component(cloud, "conductor")
        await conductor.stop()
        link.down = True
        server_id = await _boot(cloud)  # accepted: the build is on record
        await _still_waiting(cloud, server_id, 0.5)
        assert await _outbox(cloud) == 1
        link.down = False
        await conductor.start()
        await cloud.wait_status(server_id, "ACTIVE", timeout=30)
        assert await _outbox(cloud) == 0
        project = (await cloud.server(server_id))["tenant_id"]
        assert (await cloud.quota_usage(project))["instances"] == 1
    finally:
        await stop_cloud(cloud)


@pytest.fixture
async def quick(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=1, build_hand_off_timeout=0.5, build_redrive_interval=0.1,
                              rpc_response_timeout=2.0)
    yield cloud
    await stop_cloud(cloud)


async def test_a_lost_cast_is_built_after_the_hand_off_timeout(quick):
    link = Link(quick.rt.bus, ("conductor",))
    link.lossy = True
    server_id = await _boot(quick)
    assert link.dropped == 1
    link.lossy = False
    await quick.wait_status(server_id, "ACTIVE", timeout=15)
    assert await _outbox(quick) == 0


async def test_a_build_whose_conductor_failed_midway_is_taken_again_once_its_lease_ends(quick):
    """The scheduler is unreachable when the conductor takes the build: the build stays claimed for
    the lease (3 x rpc_response_timeout), then is taken again and made, once."""
    link = Link(quick.rt.bus, ("scheduler",))
    link.down = True
    server_id = await _boot(quick)
    await _still_waiting(quick, server_id, 1.0)
    link.down = False
    await quick.wait_status(server_id, "ACTIVE", timeout=15)
    assert await _outbox(quick) == 0
    r = await quick.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
    assert [a["action"] for a in r.json()["instanceActions"]] == ["create"]
    usage = await quick.hypervisor_usage()
    assert (usage["running_vms"], usage["allocations"]) == (1, 1), usage


async def test_a_server_deleted_while_its_build_waits_is_simply_gone(quick):
    link = Link(quick.rt.bus, ("conductor",))
    link.down = True
    server_id = await _boot(quick)
    r = await quick.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
    assert r.status_code == 204, r.text
    link.down = False
    await quick.wait_gone(server_id)
    deadline = time.monotonic() + 10
    while await _outbox(quick):
        assert time.monotonic() < deadline, "the build request of a deleted server was never closed"
        await asyncio.sleep(0.05)
    usage = await quick.hypervisor_usage()
    assert (usage["running_vms"], usage["allocations"]) == (0, 0), usage


async def test_a_delete_whose_cast_was_lost_is_finished_by_the_host(tmp_path):
    """A delete accepted while its cast to the host is lost (a broker restart): the host finishes
    it once it has been waiting longer than rpc_response_timeout (found by the chaos run: such a
    server stayed BUILD/deleting for good)."""
    cloud = await start_cloud(tmp_path, fake_hosts=1, rpc_response_timeout=1.0, task_state_timeout=2.0)
    try:
        server_id = await _boot(cloud)
        await cloud.wait_status(server_id, "ACTIVE")
        link = Link(cloud.rt.bus, ("compute",))
        link.lossy = True
        r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
        assert r.status_code == 204, r.text
        assert link.dropped == 1
        link.lossy = False
        assert (await cloud.server(server_id))["OS-EXT-STS:task_state"] == "deleting"
        await cloud.wait_gone(server_id, timeout=15)
        usage = await cloud.hypervisor_usage()
        assert (usage["running_vms"], usage["allocations"]) == (0, 0), usage
    finally:
        await stop_cloud(cloud)


async def _build_claimed_by(cloud, claimer: str) -> str:
    """A server whose build request ``claimer`` holds for the shipped lease (180 s), while the
    conductor of this cloud is stopped; returns the server's id."""
    link = Link(cloud.rt.bus, ("conductor",))
    await _component(cloud, "conductor").stop()
    link.lossy = True
    server_id = await _boot(cloud)
    link.lossy = False
    async with cloud.rt.db.transaction() as s:
        await s.execute(update(BuildRequest).values(claimed_by=claimer,
                                                    claimed_until=utcnow() + dt.timedelta(seconds=180)))
    return server_id


async def test_a_build_held_by_a_conductor_process_that_died_is_taken_at_once(tmp_path):
    """With the shipped defaults (a 180 s lease): a conductor process of this host that was killed
    while holding a build does not make it wait out the lease; the next process of the host (here:
    the re-drive at conductor start) takes it at once."""
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        dead = subprocess.Popen(["true"])
        dead.wait()  # a pid that no longer runs
        server_id = await _build_claimed_by(cloud, f"{cloud.rt.cfg.host}/{dead.pid}/earlier")
        await _component(cloud, "conductor").start()
        await cloud.wait_status(server_id, "ACTIVE", timeout=15)
        assert await _outbox(cloud) == 0
    finally:
        await stop_cloud(cloud)


async def test_a_build_held_by_a_live_conductor_elsewhere_is_left_to_it(tmp_path):
    """A claim of another host's conductor is honoured until its lease ends."""
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        server_id = await _build_claimed_by(cloud, "other-host/1/t")
        await _component(cloud, "conductor").start()
        await _still_waiting(cloud, server_id, 1.0)
        assert await _outbox(cloud) == 1
    finally:
        await stop_cloud(cloud)


async def test_a_reschedule_whose_cast_back_was_lost_is_still_built(tmp_path):
    """A build that failed on a host goes back to a conductor through a build request too: the cast
    back lost (a broker restart, say), another host still builds it."""
    cloud = await start_cloud(tmp_path, fake_hosts=2, build_hand_off_timeout=0.5, build_redrive_interval=0.1)
    try:
        dropped = []
        original = cloud.rt.bus.cast

        async def losing_reschedules(ctx, topic, method, *args, **kwargs):
            if topic == "conductor" and "last_error" in kwargs.get("request_spec", {}):
                dropped.append(kwargs["instance_uuids"])
                return None
            return await original(ctx, topic, method, *args, **kwargs)

        cloud.rt.bus.cast = losing_reschedules
        r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
            "name": "fails-on-1", "id": "fails-on-1", "ram": 256, "vcpus": 1, "disk": 1}}, headers=ADMIN)
        assert r.status_code == 200, r.text
        r = await cloud.compute.post("/v2.1/flavors/fails-on-1/os-extra_specs", headers=ADMIN,
                                     json={"extra_specs": {"nefos:fake_fail_spawn": "host-1"}})
        assert r.status_code == 200, r.text
        net = await cloud.make_network()
        server_ids = [(await cloud.boot(flavor="fails-on-1", networks=[{"uuid": net["id"]}]))["server"]["id"]
                      for _ in range(3)]
        for server_id in server_ids:
            server = await cloud.wait_status(server_id, "ACTIVE", timeout=20)
            assert server["OS-EXT-SRV-ATTR:host"] == "host-2"
        assert dropped  # at least one went to host-1 first and its way back was lost
        assert await _outbox(cloud) == 0
    finally:
        await stop_cloud(cloud)


@pytest.mark.parametrize("tuned", [False, True], ids=["shipped-defaults", "tuned"])
async def test_a_build_its_host_is_not_listening_for_goes_back_and_is_built_once(tmp_path, tuned):
    """The scheduler picks a host that reports in but whose queue is gone (restarting, or its link to
    the broker just cut): the cast is refused, so the build goes back unplaced, its claim released,
    rather than waiting on that host; it is built, once, when the host listens again."""
    tuning = dict(build_hand_off_timeout=0.5, build_redrive_interval=0.1, rpc_response_timeout=2.0) if tuned else {}
    cloud = await start_cloud(tmp_path, fake_hosts=1, **tuning)
    try:
        service = _component(cloud, "compute:host-1").service
        await cloud.rt.bus.unserve(service.endpoint)
        refused = []
        original = cloud.rt.bus.cast

        async def counting(ctx, topic, method, *args, **kwargs):
            try:
                return await original(ctx, topic, method, *args, **kwargs)
            except exceptions.NoServerListening:
                refused.append(method)
                raise

        cloud.rt.bus.cast = counting
        server_id = await _boot(cloud)
        deadline = time.monotonic() + 10
        while "build_and_run_instance" not in refused:
            assert time.monotonic() < deadline, "the conductor never tried the host"
            await asyncio.sleep(0.02)
        # Not left on the host that never got it: unplaced, nothing claimed, still to be built.
        deadline = time.monotonic() + 5
        while True:
            server = await cloud.server(server_id)
            usage = await cloud.hypervisor_usage()
            if server["OS-EXT-SRV-ATTR:host"] is None and usage["allocations"] == 0:
                break
            assert time.monotonic() < deadline, (server["OS-EXT-SRV-ATTR:host"], usage)
            await asyncio.sleep(0.02)
        assert (server["status"], server["OS-EXT-STS:task_state"]) == ("BUILD", "scheduling")
        assert await _outbox(cloud) == 1
        await cloud.rt.bus.serve(service.topic, service.endpoint, host=service.host)
        server = await cloud.wait_status(server_id, "ACTIVE", timeout=60)
        assert server["OS-EXT-SRV-ATTR:host"] == "host-1"
        assert await _outbox(cloud) == 0
        usage = await cloud.hypervisor_usage()
        assert (usage["running_vms"], usage["allocations"]) == (1, 1), usage
    finally:
        await stop_cloud(cloud)


async def test_a_delete_racing_its_builds_return_unplaced_deletes_it_here(tmp_path, monkeypatch):
    """The API reads the server on its host, then the conductor puts the build back unplaced (the
    host never got it), then the API marks it deleting: no host will ever finish that delete, so
    the API does it itself."""
    from nefos.control.compute import api as compute_api
    from nefos.db.models import Instance

    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        service = _component(cloud, "compute:host-1").service
        await cloud.rt.bus.unserve(service.endpoint)
        server_id = await _boot(cloud)
        deadline = time.monotonic() + 10
        while (await _outbox(cloud)) != 1 or (await cloud.server(server_id))["OS-EXT-SRV-ATTR:host"] is not None:
            assert time.monotonic() < deadline, "the build never went back unplaced"
            await asyncio.sleep(0.02)
        async with cloud.rt.db.transaction() as s:  # placed again, its cast on the way
            await s.execute(update(Instance).where(Instance.uuid == server_id).values(host="host-1", node="host-1"))
        original = compute_api.ComputeAPI.host_is_up

        async def unplaced_meanwhile(self, host, is_up):
            async with cloud.rt.db.transaction() as s:
                await s.execute(update(Instance).where(Instance.uuid == server_id).values(host=None, node=None))
            return await original(self, host, is_up)

        monkeypatch.setattr(compute_api.ComputeAPI, "host_is_up", unplaced_meanwhile)
        r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
        monkeypatch.undo()
        assert r.status_code == 204, r.text
        await cloud.wait_gone(server_id, timeout=10)
        assert (await cloud.hypervisor_usage())["allocations"] == 0
    finally:
        await stop_cloud(cloud)


async def test_a_claim_a_dead_conductor_left_for_a_server_deleted_meanwhile_is_given_back(tmp_path):
    """A conductor process killed after the scheduler claimed for a server the user deleted meanwhile
    (the claim made after the delete, and the conductor killed before it gave it back): the next conductor taking the build gives it back."""
    from nefos.db.models import ComputeNode
    from nefos.objects import allocations

    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        dead = subprocess.Popen(["true"])
        dead.wait()
        server_id = await _build_claimed_by(cloud, f"{cloud.rt.cfg.host}/{dead.pid}/earlier")
        r = await cloud.compute.delete(f"/v2.1/servers/{server_id}", headers=ADMIN)
        assert r.status_code == 204, r.text
        await cloud.wait_gone(server_id, timeout=10)
        async with cloud.rt.db.transaction() as s:  # the scheduler's claim, made after the delete
            node = (await s.execute(select(ComputeNode.id))).scalar_one()
            assert await allocations.claim(s, server_id, node, vcpus=1, memory_mb=512, disk_gb=1)
        assert (await cloud.hypervisor_usage())["allocations"] == 1  # the dead conductor's, left behind
        await _component(cloud, "conductor").start()
        deadline = time.monotonic() + 15
        while await _outbox(cloud) or (await cloud.hypervisor_usage())["allocations"]:
            assert time.monotonic() < deadline, await cloud.hypervisor_usage()
            await asyncio.sleep(0.05)
        usage = await cloud.hypervisor_usage()
        assert (usage["vcpus_used"], usage["memory_mb_used"]) == (0, 0), usage
    finally:
        await stop_cloud(cloud)
