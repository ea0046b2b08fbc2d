"""A compute host cut off from the control plane keeps its process and its guests; once it is judged
down its servers may be evacuated (or deleted) elsewhere. When its reports get through again after
at least ``service_down_time`` without one, it destroys, without a restart, the guests an
evacuation record proves gone (completing those migrations) and those of deleted servers, and
keeps its own. Nova does this only at start-up (``_destroy_evacuated_instances``); a partitioned
host is never restarted, so Nefos also does it on the host's return. A gap shorter than
``service_down_time`` runs nothing; an evacuation still under way when the host returns leaves its
guest until the evacuation ends."""

from __future__ import annotations

import asyncio
import contextlib
import time

from nefos import exceptions
from nefos.host.compute import init_host as host_init
from nefos.config import Config
from tests.compute.conftest import boot_active, compute_component
from tests.clouds import start_cloud, stop_cloud
from tests.moves.test_evacuate import (DOWN_TIME, FAST, REPORT_INTERVAL, evacuate, evacuations, fixed_ips,
                                          wait_evacuated, wait_state)


class Cable:
    """The host's line to the control plane (its conductor and network clients). Pulled, every
    call and cast the host makes fails as over a cut link, while its process, periodic tasks and
    guests go on: a partitioned host, not a dead one."""

    def __init__(self, cloud, host: str):
        manager = cloud.compute_manager(host)
        self.pulled = False
        self.reports_through = 0  # the host's heartbeats that reached the conductor
        self.reports_lost = 0
        for client in (manager.conductor.client, manager.network_api.client):
            self._wrap(client)

    def _wrap(self, client) -> None:
        call, cast = client.call, client.cast

        async def cut_call(ctx, method, **kwargs):
            if self.pulled:
                if method == "service_heartbeat":
                    self.reports_lost += 1
                raise exceptions.ServiceUnavailable(f"timed out waiting for {method} (link down)")
            result = await call(ctx, method, **kwargs)
            if method == "service_heartbeat":
                self.reports_through += 1
            return result

        async def cut_cast(ctx, method, **kwargs):
            if self.pulled:
                raise exceptions.ServiceUnavailable(f"timed out sending {method} (link down)")
            return await cast(ctx, method, **kwargs)

        client.call, client.cast = cut_call, cut_cast


def spy_returns(monkeypatch) -> list[tuple[str, bool]]:
    """Every run of the host's work on return: (host, settled)."""
    runs: list[tuple[str, bool]] = []
    real = host_init.after_return

    async def after_return(manager) -> bool:
        settled = await real(manager)
        runs.append((manager.host, settled))
        return settled
    monkeypatch.setattr(host_init, "after_return", after_return)
    return runs


async def until(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _partition_evacuate_return(cloud, runs: list, down_within: float, back_within: float) -> None:
    await wait_state(cloud, "host-1", "up", down_within)
    await wait_state(cloud, "host-2", "up", down_within)
    moved, kept, deleted = await boot_active(cloud, count=3, host="host-1")
    ports_before = fixed_ips(await cloud.ports(device_id=moved))
    component, guests = compute_component(cloud, "host-1"), cloud.driver("host-1").guests

    cable = Cable(cloud, "host-1")
    cable.pulled = True
    await wait_state(cloud, "host-1", "down", down_within)
    await evacuate(cloud, moved, {}, v="2.14")
    server = await wait_evacuated(cloud, moved)
    assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2"), server.get("fault")
    assert fixed_ips(await cloud.ports(device_id=moved)) == ports_before
    # Its host is down: the API deletes this one itself (Nova's local delete); the guest stays there.
    r = await cloud.compute.delete(f"/v2.1/servers/{deleted}")
    assert r.status_code == 204, r.text
    await cloud.wait_gone(deleted)
    # Cut off, host-1 knows nothing of either: the evacuated server runs twice, as does the deleted one.
    assert {moved, kept, deleted} <= set(guests) and moved in cloud.driver("host-2").guests

    since = len(runs)  # (a slow start-up may have run it once already: its first report came late)
    cable.pulled = False
    # Its work on return ran to its end (settled), and took both guests.
    await until(lambda: ("host-1", True) in runs[since:], "host-1 back never settled its guests", back_within)
    assert moved not in guests and deleted not in guests
    assert compute_component(cloud, "host-1") is component  # the same process: no restart
    assert kept in guests  # still its own
    (migration,) = await evacuations(cloud, moved)
    assert (migration["status"], migration["source_compute"], migration["dest_compute"]) == (
        "completed", "host-1", "host-2")
    # The evacuated server kept everything on its new host; host-1's own server is as it was.
    assert moved in cloud.driver("host-2").guests
    ports = await cloud.ports(device_id=moved)
    assert fixed_ips(ports) == ports_before and {p["binding:host_id"] for p in ports} == {"host-2"}
    assert (await cloud.wait_status(moved, "ACTIVE"))["OS-EXT-SRV-ATTR:host"] == "host-2"
    assert (await cloud.wait_status(kept, "ACTIVE"))["OS-EXT-SRV-ATTR:host"] == "host-1"
    await wait_state(cloud, "host-1", "up", back_within)


async def test_host_back_from_a_partition_destroys_its_evacuated_guest_without_a_restart(tmp_path, monkeypatch):
    """report_interval and service_down_time tuned short; the sibling below uses the shipped ones."""
    runs = spy_returns(monkeypatch)
    cloud = await start_cloud(tmp_path, fake_hosts=2, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME, **FAST)
    try:
        await _partition_evacuate_return(cloud, runs, down_within=15, back_within=15)
    finally:
        await stop_cloud(cloud)


async def test_host_back_from_a_partition_with_shipped_liveness_defaults(tmp_path, monkeypatch):
    """The shipped report_interval (10 s) and service_down_time (60 s): judged down within 70 s,
    back with its next report after the link returns."""
    defaults = Config()
    runs = spy_returns(monkeypatch)
    cloud = await start_cloud(tmp_path, fake_hosts=2, report_interval=defaults.report_interval,
                              service_down_time=defaults.service_down_time, **FAST)
    try:
        await _partition_evacuate_return(cloud, runs, down_within=defaults.service_down_time + 60,
                                         back_within=defaults.report_interval + 50)
    finally:
        await stop_cloud(cloud)


async def test_a_gap_shorter_than_service_down_time_runs_nothing(tmp_path, monkeypatch):
    """Reports lost for a while, but the host never judged down: no evacuation can have happened,
    its return work does not run."""
    runs = spy_returns(monkeypatch)
    cloud = await start_cloud(tmp_path, fake_hosts=1, report_interval=REPORT_INTERVAL,
                              service_down_time=Config().service_down_time, **FAST)
    try:
        await wait_state(cloud, "host-1", "up")
        (server,) = await boot_active(cloud, count=1, host="host-1")
        cable = Cable(cloud, "host-1")
        cable.pulled = True
        await until(lambda: cable.reports_lost >= 2, "no report was lost", 15)
        assert (await cloud.compute.get("/v2.1/os-services")).status_code == 200
        cable.pulled = False
        through = cable.reports_through
        # Two reports through: the first one measured the gap, and would have started the work.
        await until(lambda: cable.reports_through >= through + 2, "no report after the link returned", 15)
        await wait_state(cloud, "host-1", "up")
        assert runs == []
        assert server in cloud.driver("host-1").guests
    finally:
        await stop_cloud(cloud)


@contextlib.asynccontextmanager
async def two_hosts_up(tmp_path):
    """A cloud of two fake hosts with short liveness times, both up."""
    cloud = await start_cloud(tmp_path, fake_hosts=2, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME, **FAST)
    try:
        await wait_state(cloud, "host-1", "up")
        await wait_state(cloud, "host-2", "up")
        yield cloud
    finally:
        await stop_cloud(cloud)


async def test_an_evacuation_under_way_when_the_host_returns_leaves_the_guest_until_it_ends(tmp_path, monkeypatch):
    runs = spy_returns(monkeypatch)
    async with two_hosts_up(tmp_path) as cloud:
        moved, kept = await boot_active(cloud, count=2, host="host-1")
        guests = cloud.driver("host-1").guests
        destination = cloud.driver("host-2")
        spawning, release = asyncio.Event(), asyncio.Event()
        real_spawn = destination.spawn

        async def held_spawn(*args, **kwargs):
            spawning.set()
            await release.wait()
            return await real_spawn(*args, **kwargs)
        monkeypatch.setattr(destination, "spawn", held_spawn)

        cable = Cable(cloud, "host-1")
        cable.pulled = True
        await wait_state(cloud, "host-1", "down")
        await evacuate(cloud, moved, {}, v="2.14")
        await asyncio.wait_for(spawning.wait(), 20)
        since = len(runs)
        cable.pulled = False
        await until(lambda: ("host-1", False) in runs[since:], "host-1 back did not look at its guests", 15)
        assert {moved, kept} <= set(guests)  # still its instance: the evacuation's outcome decides
        (migration,) = await evacuations(cloud, moved)
        assert migration["status"] in ("accepted", "pre-migrating")

        release.set()
        server = await wait_evacuated(cloud, moved)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2"), server.get("fault")
        await until(lambda: moved not in guests, "the guest evacuated meanwhile stayed on host-1", 15)
        assert kept in guests
        await until(lambda: runs[-1] == ("host-1", True), "host-1's return work never settled", 15)
        (migration,) = await evacuations(cloud, moved)
        assert migration["status"] == "completed"


async def test_a_guest_whose_destroy_fails_keeps_its_evacuation_open_until_it_goes(tmp_path, monkeypatch):
    """The evacuated guest's destroy fails on the host's return: its migration stays ``done`` (not
    completed: the guest still runs), the return is not settled, and the next report tries again."""
    runs = spy_returns(monkeypatch)
    async with two_hosts_up(tmp_path) as cloud:
        moved, kept = await boot_active(cloud, count=2, host="host-1")
        source = cloud.driver("host-1")
        real_destroy, failures = source.destroy, []

        async def failing_destroy(ctx, instance, *args, **kwargs):
            if instance["uuid"] == moved and not failures:
                failures.append(moved)
                raise RuntimeError("the hypervisor refused to destroy the guest")
            return await real_destroy(ctx, instance, *args, **kwargs)
        monkeypatch.setattr(source, "destroy", failing_destroy)

        cable = Cable(cloud, "host-1")
        cable.pulled = True
        await wait_state(cloud, "host-1", "down")
        await evacuate(cloud, moved, {}, v="2.14")
        assert (await wait_evacuated(cloud, moved))["OS-EXT-SRV-ATTR:host"] == "host-2"
        since = len(runs)
        cable.pulled = False

        await until(lambda: ("host-1", False) in runs[since:], "host-1 back did not look at its guests", 15)
        assert failures == [moved] and moved in source.guests
        (migration,) = await evacuations(cloud, moved)
        assert migration["status"] == "done"  # not completed while its guest runs here

        await until(lambda: ("host-1", True) in runs[since:], "the failed destroy was never tried again", 15)
        assert moved not in source.guests and kept in source.guests
        (migration,) = await evacuations(cloud, moved)
        assert migration["status"] == "completed"
