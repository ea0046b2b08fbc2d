"""Evacuation end to end with compute hosts that hold no database (every read and write through the
conductor), each its own process, over RabbitMQ and PostgreSQL: a host's process dies, the operator
forces it down, its server is evacuated to the other host (same fixed IP, ports bound there), and the
host's process started again on the same hypervisor destroys the evacuated guest (its fake
hypervisor's state survives the process), completing the migration, and keeps its own server."""

from __future__ import annotations

import json
import signal
import time

import pytest

from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from tests.deployment.test_dbless_compute import CONTROL_PLANE, _host_env
from tests.deployment.test_multiprocess import _wait, running_cloud

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


def _guests(hypervisor_dir, host: str) -> set[str]:
    path = hypervisor_dir / f"{host}.json"
    return {g["uuid"] for g in json.loads(path.read_text())["guests"]} if path.exists() else set()


def _until(condition, procs, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        procs.check_alive()
        assert time.monotonic() < deadline, procs.logs()[-4000:]
        time.sleep(0.3)
    return value


def test_evacuation_between_hosts_without_a_database(tmp_path):
    control_state, hypervisors = tmp_path / "control", tmp_path / "hypervisors"
    control_state.mkdir()
    with running_cloud("postgresql", control_state, CONTROL_PLANE, hypervisors=0) as (compute, network, procs):
        env = dict(_host_env(procs.env), NEFOS_FAKE_HYPERVISOR_DIR=str(hypervisors))
        states = {}
        for host in ("dbless-1", "dbless-2"):
            states[host] = tmp_path / host
            states[host].mkdir()
            procs.start(["compute", "--host", host], env=env, state=states[host])

        def both_up():
            services = compute.get("/v2.1/os-services", params={"binary": "nova-compute"}).json()["services"]
            return {s["host"]: s["state"] for s in services} == {"dbless-1": "up", "dbless-2": "up"}
        _until(both_up, procs)
        net_id = network.post("/v2.0/networks", json={"network": {"name": "evac-net"}}).json()["network"]["id"]
        r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.29.0.0/24",
                                                           "ip_version": 4}})
        assert r.status_code == 201, r.text
        ids = []
        for name in ("moved", "kept"):
            r = compute.post("/v2.1/servers", json={"server": {
                "name": name, "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}],
                "availability_zone": "nova:dbless-1"}})
            assert r.status_code == 202, r.text
            ids.append(r.json()["server"]["id"])
        moved, kept = ids
        servers = {i: _wait(compute, i, "ACTIVE", procs) for i in ids}
        address = servers[moved]["addresses"]["evac-net"][0]["addr"]

        # dbless-1's process dies (its hypervisor and guests stay); the operator forces it down.
        (name, lost, log) = next(p for p in procs.procs if p[0] == "compute---host-dbless-1")
        procs.procs.remove((name, lost, log))
        lost.send_signal(signal.SIGKILL)
        lost.wait(timeout=20)
        log.close()
        service = compute.get("/v2.1/os-services", params={"host": "dbless-1"},
                              headers={"OpenStack-API-Version": "compute 2.53"}).json()["services"][0]
        r = compute.put(f"/v2.1/os-services/{service['id']}", json={"forced_down": True},
                        headers={"OpenStack-API-Version": "compute 2.53"})
        assert r.status_code == 200, r.text

        r = compute.post(f"/v2.1/servers/{moved}/action", json={"evacuate": {}},
                         headers={"OpenStack-API-Version": "compute 2.14"})
        assert r.status_code == 200, r.text
        server = _wait(compute, moved, "ACTIVE", procs)
        assert server["OS-EXT-SRV-ATTR:host"] == "dbless-2"
        assert server["addresses"]["evac-net"][0]["addr"] == address
        ports = network.get("/v2.0/ports", params={"device_id": moved}).json()["ports"]
        assert {p["binding:host_id"] for p in ports} == {"dbless-2"}
        assert moved in _guests(hypervisors, "dbless-2") and moved in _guests(hypervisors, "dbless-1")

        # dbless-1 back: unforced, its process started again on the same hypervisor.
        r = compute.put(f"/v2.1/os-services/{service['id']}", json={"forced_down": False},
                        headers={"OpenStack-API-Version": "compute 2.53"})
        assert r.status_code == 200, r.text
        procs.start(["compute", "--host", "dbless-1"], env=env, state=states["dbless-1"])
        _until(lambda: moved not in _guests(hypervisors, "dbless-1"), procs)
        assert kept in _guests(hypervisors, "dbless-1")

        def completed():
            migrations = compute.get("/v2.1/os-migrations", headers={"OpenStack-API-Version": "compute 2.23"},
                                     params={"instance_uuid": moved}).json()["migrations"]
            return [m["status"] for m in migrations] == ["completed"]
        _until(completed, procs)
        assert _wait(compute, kept, "ACTIVE", procs)["OS-EXT-SRV-ATTR:host"] == "dbless-1"
        assert _wait(compute, moved, "ACTIVE", procs)["OS-EXT-SRV-ATTR:host"] == "dbless-2"
        for server_id in ids:
            assert compute.delete(f"/v2.1/servers/{server_id}").status_code == 204
        for server_id in ids:
            _wait(compute, server_id, None, procs)
