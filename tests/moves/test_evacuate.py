"""Host loss and evacuation on a fake multi-host cloud, as Nova: a compute host whose heartbeats stop
is down (or an operator forces it down at once), its servers are evacuated to other hosts (same
ports, same fixed IPs, the claim moved), and when it comes back it destroys only the guests an
evacuation record proves gone, completing those migrations."""

from __future__ import annotations

import asyncio
import time

from nefos.objects import allocations, instance as instance_obj
from nefos.model import states
from tests.compute.conftest import boot_active, crash_compute, set_instance, start_compute
from tests.clouds import start_cloud, stop_cloud

FAST = {"lifecycle_stopped_delay": 0.0, "sync_power_state_interval": -1}
REPORT_INTERVAL = 0.2
DOWN_TIME = 1.5


def version(v: str) -> dict:
    return {"OpenStack-API-Version": f"compute {v}"}


async def compute_services(cloud) -> dict[str, dict]:
    r = await cloud.compute.get("/v2.1/os-services", params={"binary": "nova-compute"}, headers=version("2.53"))
    assert r.status_code == 200, r.text
    return {s["host"]: s for s in r.json()["services"]}


async def wait_state(cloud, host: str, state: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while (await compute_services(cloud))[host]["state"] != state:
        assert time.monotonic() < deadline, f"{host} never became {state}"
        await asyncio.sleep(0.05)


async def evacuate(cloud, server_id: str, args: dict | None = None, v: str = "2.1", expect: int = 200):
    r = await cloud.compute.post(f"/v2.1/servers/{server_id}/action", json={"evacuate": args or {}},
                                 headers=version(v))
    assert r.status_code == expect, r.text
    return r


async def wait_evacuated(cloud, server_id: str, status: str = "ACTIVE", timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        server = await cloud.server(server_id)
        if server["status"] in (status, "ERROR") and server["OS-EXT-STS:task_state"] is None:
            return server
        assert time.monotonic() < deadline, (server["status"], server["OS-EXT-STS:task_state"])
        await asyncio.sleep(0.05)


async def evacuations(cloud, server_id: str) -> list[dict]:
    r = await cloud.compute.get("/v2.1/os-migrations", params={"instance_uuid": server_id}, headers=version("2.59"))
    assert r.status_code == 200, r.text
    return [m for m in r.json()["migrations"] if m["migration_type"] == "evacuation"]


def fixed_ips(ports: list[dict]) -> dict[str, list[str]]:
    return {p["id"]: sorted(ip["ip_address"] for ip in p["fixed_ips"]) for p in ports}


async def node_id(cloud, host: str) -> int:
    from sqlalchemy import select

    from nefos.db.models import ComputeNode
    async with cloud.rt.db.reader() as s:
        return (await s.execute(select(ComputeNode.id).where(ComputeNode.host == host,
                                                             ComputeNode.deleted == 0))).scalar_one()


async def test_lost_host_evacuated_and_its_return_destroys_only_proven_guests(tmp_path, monkeypatch):
    """Heartbeats stop (the compute component is killed), the host is down after service_down_time
    (tuned short here; the sibling below uses the default through forced_down)."""
    # The destination's network-vif-plugged must reach it as a cast (the server still names its failed
    # host while it spawns), not from its inbox re-read: that one is put past the test's waits.
    from nefos.host.compute import instance_events
    monkeypatch.setattr(instance_events, "INBOX_POLL", 60.0)
    cloud = await start_cloud(tmp_path, fake_hosts=2, report_interval=REPORT_INTERVAL,
                              service_down_time=DOWN_TIME, **FAST)
    try:
        await wait_state(cloud, "host-1", "up")
        await wait_state(cloud, "host-2", "up")
        moved, kept, unproven = await boot_active(cloud, count=3, host="host-1")
        ports_before = fixed_ips(await cloud.ports(device_id=moved))
        assert ports_before

        # The host still reports: evacuating its server could run it twice (Nova: 400).
        r = await evacuate(cloud, moved, {"onSharedStorage": False}, expect=400)
        assert r.json()["badRequest"]["message"] == "Compute service of host-1 is still in use."

        old = await crash_compute(cloud, "host-1")  # its heartbeats stop with it
        await wait_state(cloud, "host-1", "down")
        assert (await compute_services(cloud))["host-2"]["state"] == "up"
        r = await cloud.compute.get("/v2.1/os-hypervisors/detail")
        assert {h["hypervisor_hostname"]: h["state"] for h in r.json()["hypervisors"]} == {
            "host-1": "down", "host-2": "up"}

        # The scheduler never picks the down host, though it is the emptier one.
        spare = (await boot_active(cloud, count=1))[0]
        assert (await cloud.server(spare))["OS-EXT-SRV-ATTR:host"] == "host-2"

        r = await evacuate(cloud, moved, {"onSharedStorage": False})
        assert isinstance(r.json()["adminPass"], str) and r.json()["adminPass"]
        server = await wait_evacuated(cloud, moved)
        assert server["status"] == "ACTIVE", server.get("fault")
        assert server["OS-EXT-SRV-ATTR:host"] == "host-2"
        assert moved in cloud.driver("host-2").guests
        # The same ports and fixed IPs, bound to the new host.
        ports = await cloud.ports(device_id=moved)
        assert fixed_ips(ports) == ports_before
        assert {p["binding:host_id"] for p in ports} == {"host-2"}
        # The claim moved: the server's own claim on host-2's node, no migration claim left.
        claim = await allocations.get(cloud.rt.db, moved)
        assert claim["compute_node_id"] == await node_id(cloud, "host-2")
        (migration,) = await evacuations(cloud, moved)
        assert (migration["status"], migration["source_compute"], migration["dest_compute"]) == (
            "done", "host-1", "host-2")
        assert await allocations.get(cloud.rt.db, migration["uuid"]) is None
        r = await cloud.compute.get(f"/v2.1/servers/{moved}/os-instance-actions")
        assert "evacuate" in [a["action"] for a in r.json()["instanceActions"]]
        # os-migrations at 2.23: the type shown (no uuid before 2.59); before 2.23, no type.
        r = await cloud.compute.get("/v2.1/os-migrations", headers=version("2.23"))
        (listed,) = r.json()["migrations"]
        assert listed["migration_type"] == "evacuation" and "uuid" not in listed
        assert (listed["source_compute"], listed["dest_compute"], listed["status"]) == ("host-1", "host-2", "done")
        r = await cloud.compute.get("/v2.1/os-migrations", headers=version("2.22"))
        assert "migration_type" not in r.json()["migrations"][0]

        # A guest whose instance is elsewhere with no evacuation recorded (say, a resize kept it).
        await set_instance(cloud, unproven, host="host-2", node="host-2")

        # host-1 comes back with its guests.
        assert {moved, kept, unproven} <= set(old.driver.guests)
        await start_compute(cloud, old)
        await wait_state(cloud, "host-1", "up")
        assert moved not in old.driver.guests  # proven evacuated: destroyed
        assert kept in old.driver.guests  # still this host's
        assert unproven in old.driver.guests  # no proof: left alone
        (migration,) = await evacuations(cloud, moved)
        assert migration["status"] == "completed"
        # The evacuated server kept everything on its new host.
        assert moved in cloud.driver("host-2").guests
        assert fixed_ips(await cloud.ports(device_id=moved)) == ports_before
        assert {p["binding:host_id"] for p in await cloud.ports(device_id=moved)} == {"host-2"}
        server = await cloud.wait_status(kept, "ACTIVE")
        assert server["OS-EXT-SRV-ATTR:host"] == "host-1"
        await set_instance(cloud, unproven, host="host-1", node="host-1")
    finally:
        await stop_cloud(cloud)


async def test_forced_down_host_with_default_down_time(tmp_path):
    """The shipped service_down_time (60 s): the operator fences the host and forces it down at once,
    as Nova's docs recommend; forced down, it is down at once and never scheduled to."""
    cloud = await start_cloud(tmp_path, fake_hosts=2, **FAST)
    try:
        running, stopped = await boot_active(cloud, count=2, host="host-1")
        await cloud.action(stopped, {"os-stop": None})
        await cloud.wait_status(stopped, "SHUTOFF")
        old = await crash_compute(cloud, "host-1")
        assert (await compute_services(cloud))["host-1"]["state"] == "up"  # it went quiet just now
        service = (await compute_services(cloud))["host-1"]
        r = await cloud.compute.put(f"/v2.1/os-services/{service['id']}", json={"forced_down": True},
                                    headers=version("2.53"))
        assert r.status_code == 200, r.text
        assert r.json()["service"]["state"] == "down" and r.json()["service"]["forced_down"] is True
        r = await cloud.compute.get("/v2.1/os-hypervisors/detail")
        assert {h["hypervisor_hostname"]: h["state"] for h in r.json()["hypervisors"]} == {
            "host-1": "down", "host-2": "up"}

        # Forced down: never scheduled to, though it is the emptier host.
        spare = (await boot_active(cloud, count=1))[0]
        assert (await cloud.server(spare))["OS-EXT-SRV-ATTR:host"] == "host-2"

        r = await evacuate(cloud, running, {}, v="2.14")
        assert not r.content
        server = await wait_evacuated(cloud, running)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2")
        # A stopped server stays stopped on its new host.
        await evacuate(cloud, stopped, {"host": "host-2"}, v="2.68")
        server = await wait_evacuated(cloud, stopped, "SHUTOFF")
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("SHUTOFF", "host-2")
        assert cloud.driver("host-2").guests[stopped].power_state == states.SHUTDOWN

        # Back: unforced (the 2.11 API) and restarted; it destroys both evacuated guests.
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers=version("2.11"),
                                    json={"host": "host-1", "binary": "nova-compute", "forced_down": False})
        assert r.status_code == 200, r.text
        await start_compute(cloud, old)
        assert running not in old.driver.guests and stopped not in old.driver.guests
        assert {m["status"] for sid in (running, stopped) for m in await evacuations(cloud, sid)} == {"completed"}
    finally:
        await stop_cloud(cloud)


async def test_evacuate_choices_and_failures(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=3, **FAST)
    try:
        r = await cloud.compute.post("/v2.1/flavors", json={"flavor": {
            "name": "fails-on-3", "ram": 64, "vcpus": 1, "disk": 1, "id": "fails3"}})
        assert r.status_code == 200, r.text
        r = await cloud.compute.post("/v2.1/flavors/fails3/os-extra_specs",
                                     json={"extra_specs": {"nefos:fake_fail_spawn": "host-3"}})
        assert r.status_code == 200, r.text
        to_3, stop_295, fails, forced = await boot_active(cloud, count=4, host="host-1")
        bad = (await boot_active(cloud, count=1, host="host-1", flavor="fails3"))[0]
        await crash_compute(cloud, "host-1")
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers=version("2.11"),
                                    json={"host": "host-1", "binary": "nova-compute", "forced_down": True})
        assert r.status_code == 200, r.text

        # A requested host, checked by the scheduler (2.29, not forced); a server in ERROR comes back ACTIVE.
        await cloud.action(to_3, {"os-resetState": {"state": "error"}})
        await cloud.wait_status(to_3, "ERROR")
        await evacuate(cloud, to_3, {"host": "host-3", "force": False}, v="2.29")
        server = await wait_evacuated(cloud, to_3)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-3")
        # 2.95: the server ends stopped.
        await evacuate(cloud, stop_295, {}, v="2.95")
        server = await wait_evacuated(cloud, stop_295, "SHUTOFF")
        assert server["status"] == "SHUTOFF" and server["OS-EXT-SRV-ATTR:host"] in ("host-2", "host-3")
        # Forced (2.29): the filters are skipped.
        await evacuate(cloud, forced, {"host": "host-2", "force": True}, v="2.29")
        server = await wait_evacuated(cloud, forced)
        assert (server["status"], server["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", "host-2")

        # The destination fails to spawn: ERROR with a fault, still on its source with its source claim,
        # the migration failed, the destination's claim released, the ports bound back.
        ports_before = fixed_ips(await cloud.ports(device_id=bad))
        await evacuate(cloud, bad, {"host": "host-3"}, v="2.14")
        server = await wait_evacuated(cloud, bad, "ERROR")
        assert server["status"] == "ERROR" and "injected spawn failure" in server["fault"]["message"]
        assert server["OS-EXT-SRV-ATTR:host"] == "host-1"
        (migration,) = await evacuations(cloud, bad)
        assert migration["status"] == "failed"
        assert await allocations.get(cloud.rt.db, migration["uuid"]) is None
        assert (await allocations.get(cloud.rt.db, bad))["compute_node_id"] == await node_id(cloud, "host-1")
        assert bad not in cloud.driver("host-3").guests
        ports = await cloud.ports(device_id=bad)
        assert fixed_ips(ports) == ports_before and {p["binding:host_id"] for p in ports} == {"host-1"}

        # No valid host (host-2 and host-3 disabled): ERROR on the source, the migration an error.
        for host in ("host-2", "host-3"):
            r = await cloud.compute.put("/v2.1/os-services/disable", json={"host": host, "binary": "nova-compute"})
            assert r.status_code == 200, r.text
        await evacuate(cloud, fails, {}, v="2.14")
        server = await wait_evacuated(cloud, fails, "ERROR")
        assert server["status"] == "ERROR" and "No valid host" in server["fault"]["message"]
        assert server["OS-EXT-SRV-ATTR:host"] == "host-1"
        (migration,) = await evacuations(cloud, fails)
        assert migration["status"] == "error"
        assert await allocations.get(cloud.rt.db, migration["uuid"]) is None
        instance = await instance_obj.get(cloud.rt.db, fails)
        assert "nefos_migration" not in (instance.get("system_metadata") or {})

        # Everything deletes cleanly (the source is down: the API deletes locally).
        for server_id in (to_3, stop_295, fails, forced, bad):
            r = await cloud.compute.delete(f"/v2.1/servers/{server_id}")
            assert r.status_code == 204, r.text
            await cloud.wait_gone(server_id)
        usage = await cloud.hypervisor_usage()
        assert usage["allocations"] == 0, usage
    finally:
        await stop_cloud(cloud)


async def test_delete_during_evacuation_wins_and_leaks_nothing(tmp_path):
    """Deleted while its destination spawns (the guest is there, its network-vif-plugged not yet: the
    fake L2 agent reports late here): the delete wins, the destination drops its guest and claim."""
    from tests.compute.conftest import eventually
    cloud = await start_cloud(tmp_path, fake_hosts=2, fake_l2_agent_delay=2.0, **FAST)
    try:
        (server,) = await boot_active(cloud, count=1, host="host-1")
        await crash_compute(cloud, "host-1")
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers=version("2.11"),
                                    json={"host": "host-1", "binary": "nova-compute", "forced_down": True})
        assert r.status_code == 200, r.text
        await evacuate(cloud, server, {}, v="2.14")

        async def spawned_on_destination():
            return server in cloud.driver("host-2").guests
        await eventually(spawned_on_destination, timeout=15, interval=0.01)
        r = await cloud.compute.delete(f"/v2.1/servers/{server}")
        assert r.status_code == 204, r.text
        await cloud.wait_gone(server)

        async def nothing_left():
            usage = await cloud.hypervisor_usage()
            return (server not in cloud.driver("host-2").guests and usage["allocations"] == 0
                    and usage["running_vms"] == 0)
        await eventually(nothing_left, timeout=15)
        assert await cloud.ports(device_id=server) == []
    finally:
        await stop_cloud(cloud)


async def test_destination_restarted_mid_evacuation_fails_it(tmp_path):
    """The destination's process dies while it spawns the evacuated guest: when it starts again the
    evacuation fails as any failure there (ERROR on the source with a fault, claim and ports back)."""
    from tests.compute.conftest import eventually
    cloud = await start_cloud(tmp_path, fake_hosts=2, **FAST)
    try:
        (server,) = await boot_active(cloud, count=1, host="host-1")
        # Booted, its flavor's copy now asks the fake driver to stall the next spawn (the evacuation's).
        await set_instance(cloud, server, flavor=dict((await instance_obj.get(cloud.rt.db, server))["flavor"],
                                                      extra_specs={"nefos:fake_spawn_delay": "60"}))
        ports_before = fixed_ips(await cloud.ports(device_id=server))
        await crash_compute(cloud, "host-1")
        r = await cloud.compute.put("/v2.1/os-services/force-down", headers=version("2.11"),
                                    json={"host": "host-1", "binary": "nova-compute", "forced_down": True})
        assert r.status_code == 200, r.text
        await evacuate(cloud, server, {}, v="2.14")

        async def spawning():
            return (await cloud.server(server))["OS-EXT-STS:task_state"] == "rebuild_spawning"
        await eventually(spawning, timeout=15)
        destination = await crash_compute(cloud, "host-2")
        await start_compute(cloud, destination)

        server_view = await wait_evacuated(cloud, server, "ERROR")
        assert server_view["status"] == "ERROR" and "interrupted by a restart" in server_view["fault"]["message"]
        assert server_view["OS-EXT-SRV-ATTR:host"] == "host-1"
        (migration,) = await evacuations(cloud, server)
        assert migration["status"] == "failed"
        assert await allocations.get(cloud.rt.db, migration["uuid"]) is None
        assert (await allocations.get(cloud.rt.db, server))["compute_node_id"] == await node_id(cloud, "host-1")
        assert server not in destination.driver.guests
        ports = await cloud.ports(device_id=server)
        assert fixed_ips(ports) == ports_before and {p["binding:host_id"] for p in ports} == {"host-1"}
    finally:
        await stop_cloud(cloud)
