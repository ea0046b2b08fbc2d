"""init_host for real: a compute process killed with SIGKILL in the middle of builds, reboots, a stop
and deletes, then started again, over RabbitMQ and PostgreSQL.

The compute host is its own process (`nefos compute`); the rest of the cloud runs in the test.
Its fake hypervisor keeps its guests in a file (``fake_hypervisor_dir``), so they outlive the
killed process as a real hypervisor's do. Flavor extra specs make each operation slow enough
to be caught half-way: nothing is staged in the database by hand.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from sqlalchemy import select

from nefos.db.models import InstanceAction, InstanceActionEvent
from nefos.model import states
from tests.backends import fresh_database
from tests.compute.conftest import eventually
from tests.clouds import start_cloud, stop_cloud
from tests.servers.test_failures import _flavor_with_specs as _flavor
from tests.deployment.test_multiprocess import RABBIT_URL, Processes

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


@pytest.fixture
def pg_url():
    with fresh_database("postgresql") as url:
        yield url


async def _compute_step_running(cloud, server_id: str, event: str) -> bool:
    """The compute host has started ``event`` for the server and not finished it."""
    async with cloud.rt.db.reader() as s:
        rows = (await s.execute(select(InstanceActionEvent.finish_time)
                                .join(InstanceAction, InstanceActionEvent.action_id == InstanceAction.id)
                                .where(InstanceAction.instance_uuid == server_id,
                                       InstanceActionEvent.event == event))).all()
    return any(finish is None for (finish,) in rows)


def _hypervisor(path) -> dict:
    """What the fake hypervisor holds: guest uuid -> power state, and the plugged VIFs."""
    saved = json.loads(path.read_text())
    return {"guests": {g["uuid"]: g["power_state"] for g in saved["guests"]}, "vifs": saved["plugged_vifs"]}


async def test_sigkill_in_the_middle_of_builds_reboots_and_deletes(tmp_path, pg_url):
    suffix = uuid.uuid4().hex[:8]
    host, exchange = f"kill-{suffix}", f"nefos-test-{suffix}"
    cloud = await start_cloud(tmp_path, fake_hosts=0, database_url=pg_url, bus_url=RABBIT_URL,
                              control_exchange=exchange, send_events_interval=0.0, sync_power_state_interval=-1)
    cfg = cloud.rt.cfg
    hv_dir = tmp_path / "hypervisor"
    env = dict(os.environ, NEFOS_DATABASE_URL=pg_url, NEFOS_BUS_URL=RABBIT_URL, NEFOS_CONTROL_EXCHANGE=exchange,
               NEFOS_AUTH_STRATEGY="noauth", NEFOS_REPORT_INTERVAL="1", NEFOS_FAKE_HYPERVISOR_DIR=str(hv_dir),
               NEFOS_LIFECYCLE_STOPPED_DELAY="0", NEFOS_SYNC_POWER_STATE_INTERVAL="-1",
               NEFOS_COMPUTE_API_PORT=str(cfg.compute_api_port), NEFOS_NETWORK_API_PORT=str(cfg.network_api_port),
               NEFOS_IMAGE_API_PORT=str(cfg.image_api_port), NEFOS_IDENTITY_API_PORT=str(cfg.identity_api_port))
    procs = Processes(tmp_path, env)
    hv_file = hv_dir / f"{host}.json"

    async def start_compute() -> None:
        procs.start(["compute", "--host", host])

        async def up():
            procs.check_alive()
            r = await cloud.compute.get("/v2.1/os-services", params={"host": host, "binary": "nova-compute"})
            services = r.json()["services"]
            return services and services[0]["state"] == "up" and services[0]["status"] == "enabled"
        await eventually(up, timeout=60, interval=0.2)

    try:
        await start_compute()
        net = await cloud.make_network()
        slow_spawn = await _flavor(cloud, "slow-spawn", {"nefos:fake_spawn_delay": "60"})
        slow_power = await _flavor(cloud, "slow-power", {"nefos:fake_power_delay": "5"})
        slow_destroy = await _flavor(cloud, "slow-destroy", {"nefos:fake_destroy_delay": "5"})

        async def boot(name: str, flavor: str) -> str:
            created = await cloud.boot(name=name, flavor=flavor, networks=[{"uuid": net["id"]}])
            return created["server"]["id"]

        ids = {name: await boot(name, flavor) for name, flavor in [
            ("hard_reboot", slow_power), ("soft_reboot", slow_power), ("stopping", slow_power),
            ("deleting", slow_destroy), ("untouched", "1")]}
        for server_id in ids.values():
            await cloud.wait_status(server_id, "ACTIVE", timeout=30)
        for name in ("building_1", "building_2", "deleting_building"):
            ids[name] = await boot(name, slow_spawn)

        async def all_under_way(steps: list[tuple[str, str]]) -> bool:
            return all([await _compute_step_running(cloud, ids[name], event) for name, event in steps])

        async def spawning() -> bool:
            return all([(await cloud.server(ids[name]))["OS-EXT-STS:task_state"] == states.SPAWNING
                        for name in ("building_1", "building_2", "deleting_building")])
        await eventually(spawning, timeout=30)
        # A delete while the build spawns.
        assert (await cloud.compute.delete(f"/v2.1/servers/{ids['deleting_building']}")).status_code == 204
        # Every other operation under way on the compute host when it dies (each takes 5 s there).
        await cloud.action(ids["hard_reboot"], {"reboot": {"type": "HARD"}})
        await cloud.action(ids["soft_reboot"], {"reboot": {"type": "SOFT"}})
        await cloud.action(ids["stopping"], {"os-stop": None})
        assert (await cloud.compute.delete(f"/v2.1/servers/{ids['deleting']}")).status_code == 204
        await eventually(lambda: all_under_way([
            ("hard_reboot", "compute_reboot_instance"), ("soft_reboot", "compute_reboot_instance"),
            ("stopping", "compute_stop_instance"), ("deleting", "compute_terminate_instance")]), timeout=3)

        (_name, proc, log), = procs.procs
        proc.kill()  # SIGKILL: nothing is finished, nothing cleaned up
        proc.wait(timeout=10)
        log.close()
        procs.procs.clear()
        before = {}
        for name, server_id in ids.items():
            r = await cloud.compute.get(f"/v2.1/servers/{server_id}")
            before[name] = r.json()["server"]["OS-EXT-STS:task_state"] if r.status_code == 200 else "gone"
        # (The delete of a spawning server may win at once, or wait on the build: either is right.)
        assert before.pop("deleting_building") in (states.DELETING, "gone")
        assert before == {"hard_reboot": states.REBOOTING_HARD, "soft_reboot": states.REBOOTING,
                          "stopping": states.POWERING_OFF, "deleting": states.DELETING,
                          "untouched": None, "building_1": states.SPAWNING, "building_2": states.SPAWNING}, before
        left = _hypervisor(hv_file)
        assert ids["deleting"] in left["guests"] and ids["building_1"] not in left["guests"]

        started = time.monotonic()
        await start_compute()
        for name in ("building_1", "building_2"):
            server = await cloud.wait_status(ids[name], "ERROR", timeout=30)
            assert "interrupted" in server["fault"]["message"], server["fault"]
            assert await cloud.ports(device_id=ids[name]) == []
        for name in ("deleting", "deleting_building"):
            await cloud.wait_gone(ids[name], timeout=30)
        for name in ("hard_reboot", "soft_reboot", "untouched"):
            server = await cloud.wait_status(ids[name], "ACTIVE", timeout=30)
            assert server["OS-EXT-STS:power_state"] == states.RUNNING, name
        server = await cloud.wait_status(ids["stopping"], "SHUTOFF", timeout=30)
        assert server["OS-EXT-STS:power_state"] == states.SHUTDOWN
        print(f"\nrestarted compute converged in {time.monotonic() - started:.1f} s")
        # No step is left open by the killed process, and no action but the creates (their servers'
        # states tell how they ended) is left unfinished.
        async with cloud.rt.db.reader() as s:
            open_steps = (await s.execute(select(InstanceAction.action, InstanceActionEvent.event)
                                          .join(InstanceAction, InstanceActionEvent.action_id == InstanceAction.id)
                                          .where(InstanceAction.instance_uuid.in_(ids.values()),
                                                 InstanceActionEvent.finish_time.is_(None)))).all()
            unfinished = (await s.execute(select(InstanceAction.action).where(
                InstanceAction.instance_uuid.in_(ids.values()), InstanceAction.finish_time.is_(None),
                InstanceAction.action != "create"))).all()
        assert (open_steps, unfinished) == ([], []), (open_steps, unfinished)
        hv = _hypervisor(hv_file)
        assert hv["guests"] == {ids["hard_reboot"]: states.RUNNING, ids["soft_reboot"]: states.RUNNING,
                                ids["untouched"]: states.RUNNING, ids["stopping"]: states.SHUTDOWN}, hv
        for name in ("hard_reboot", "soft_reboot", "untouched", "stopping"):
            (port,) = await cloud.ports(device_id=ids[name])
            assert hv["vifs"][port["id"]] == ids[name]
        assert set(hv["vifs"].values()) == set(hv["guests"])

        # Nothing leaked: with every server deleted, every counter is back to zero.
        for server_id in ids.values():
            r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
            assert r.status_code in (204, 404), r.text
        for server_id in ids.values():
            await cloud.wait_gone(server_id, timeout=30)
        r = await cloud.compute.get("/v2.1/os-hypervisors/detail")
        (hyp,) = r.json()["hypervisors"]
        assert (hyp["vcpus_used"], hyp["memory_mb_used"], hyp["local_gb_used"], hyp["running_vms"]) == (0, 0, 0, 0)
        assert (await cloud.hypervisor_usage())["allocations"] == 0
        usage = await cloud.quota_usage("00000000000000000000000000000001")
        assert (usage["instances"], usage["cores"], usage["ram"]) == (0, 0, 0), usage
        assert await cloud.ports(device_owner="compute:nova") == []
        assert _hypervisor(hv_file) == {"guests": {}, "vifs": {}}
        procs.check_alive()
    finally:
        procs.stop()
        await stop_cloud(cloud)
