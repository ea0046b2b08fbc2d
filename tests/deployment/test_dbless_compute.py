"""A compute host holds no database credentials: ``nefos compute`` (the CLI, fake driver) runs with
no database URL and a state directory of its own, against a control plane (identity, image,
network, scheduler, conductor, API) in other processes over RabbitMQ and PostgreSQL; a server
boots on it, stops, starts and is deleted, and the host registers and heartbeats through the
conductor (Nova's conductor as the database proxy of nova-compute)."""

from __future__ import annotations

import os
import time

import pytest

from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from tests.deployment.test_multiprocess import _wait, running_cloud

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]

CONTROL_PLANE = [["identity"], ["image"], ["network"], ["scheduler"], ["conductor"], ["api"]]


def _host_env(cloud_env: dict) -> dict:
    """The cloud's environment without any database setting."""
    return {k: v for k, v in cloud_env.items() if not k.startswith("NEFOS_DATABASE")}


def test_a_compute_host_without_a_database_runs_servers(tmp_path):
    host_state = tmp_path / "dbless-host"
    host_state.mkdir()
    control_state = tmp_path / "control"
    control_state.mkdir()
    with running_cloud("postgresql", control_state, CONTROL_PLANE, hypervisors=0) as (compute, network, procs):
        env = _host_env(procs.env)
        assert "NEFOS_DATABASE_URL" not in env
        procs.start(["compute", "--host", "dbless-1"], env=env, state=host_state)
        deadline = time.monotonic() + 60
        while True:  # the host reported its node (through the conductor) and heartbeats
            procs.check_alive()
            services = compute.get("/v2.1/os-services", params={"binary": "nova-compute",
                                                                "host": "dbless-1"}).json()["services"]
            hypervisors = compute.get("/v2.1/os-hypervisors").json()["hypervisors"]
            if (services and services[0]["state"] == "up"
                    and any(h["hypervisor_hostname"] == "dbless-1" for h in hypervisors)):
                break
            assert time.monotonic() < deadline, procs.logs()
            time.sleep(0.5)
        net_id = network.post("/v2.0/networks", json={"network": {"name": "dbless-net"}}).json()["network"]["id"]
        r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.19.0.0/24",
                                                           "ip_version": 4}})
        assert r.status_code == 201, r.text
        r = compute.post("/v2.1/servers", json={"server": {
            "name": "dbless", "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}],
            "availability_zone": "nova:dbless-1"}})
        assert r.status_code == 202, r.text
        server_id = r.json()["server"]["id"]
        server = _wait(compute, server_id, "ACTIVE", procs)
        assert server["OS-EXT-SRV-ATTR:host"] == "dbless-1"
        assert server["addresses"]["dbless-net"][0]["addr"].startswith("10.19.0.")
        for action, status in (({"os-stop": None}, "SHUTOFF"), ({"os-start": None}, "ACTIVE")):
            r = compute.post(f"/v2.1/servers/{server_id}/action", json=action)
            assert r.status_code == 202, r.text
            _wait(compute, server_id, status, procs)
        events = compute.get(f"/v2.1/servers/{server_id}/os-instance-actions").json()["instanceActions"]
        assert {a["action"] for a in events} >= {"create", "stop", "start"}
        assert compute.delete(f"/v2.1/servers/{server_id}").status_code == 204
        _wait(compute, server_id, None, procs)
        procs.check_alive()
        host_log = (control_state / "compute---host-dbless-1.log").read_text()
    # Nothing of a database was on the host: no SQLite file in its state directory, and its log
    # names none.
    assert not [p for p in os.listdir(host_state) if "sqlite" in p], os.listdir(host_state)
    assert "postgresql" not in host_log and "sqlite" not in host_log.lower(), host_log[-2000:]
