"""Each process of a multi-process cloud serves its own /metrics: a compute host without a database
(``nefos compute``) shows the build it ran, and an API process shows every service's state as
os-services says it (over RabbitMQ and PostgreSQL, each service its own process)."""

from __future__ import annotations

import time

import httpx
import pytest

from nefos.cmd.allinone import free_port
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.metrics.test_metrics import samples, total
from tests.deployment.test_dbless_compute import CONTROL_PLANE, _host_env
from tests.deployment.test_multiprocess import _wait, running_cloud

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


def _scrape(port: int) -> dict:
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10, verify=verified_tls())
    assert r.status_code == 200, r.text
    return samples(r.text)


def _until(check, what: str, procs, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        procs.check_alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{procs.logs()}"
        time.sleep(0.2)
    return found


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=2, verify=verified_tls()).text == "OK"
    except httpx.TransportError:
        return False


def test_every_process_serves_its_own_metrics(tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    host_state = tmp_path / "host"
    host_state.mkdir()
    with running_cloud("postgresql", control, CONTROL_PLANE, hypervisors=0) as (compute, network, procs):
        host_port, api_port, second_api = free_port(), free_port(), free_port()
        procs.start(["compute", "--host", "metered-1"], state=host_state,
                    env=dict(_host_env(procs.env), NEFOS_METRICS_PORT=str(host_port)))
        # A second Compute API process, its operator listener on a port of its own.
        procs.start(["api"], env=dict(procs.env, NEFOS_METRICS_PORT=str(api_port),
                                      NEFOS_COMPUTE_API_PORT=str(second_api)))
        _until(lambda: _answers(host_port) and _answers(api_port), "both operator listeners", procs)
        _until(lambda: total(_scrape(api_port), "nefos_service_up", binary="nova-compute", host="metered-1") == 1,
               "the API process to see the host up", procs)

        net_id = network.post("/v2.0/networks", json={"network": {"name": "metered"}}).json()["network"]["id"]
        r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.21.0.0/24",
                                                           "ip_version": 4}})
        assert r.status_code == 201, r.text
        before = _scrape(host_port)
        r = compute.post("/v2.1/servers", json={"server": {
            "name": "metered", "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}],
            "availability_zone": "nova:metered-1"}})
        assert r.status_code == 202, r.text
        _wait(compute, r.json()["server"]["id"], "ACTIVE", procs)
        # The host counts the build once its last steps after ACTIVE (its resource tracker, the
        # create.end notification) are done.
        def counted() -> dict | None:
            scraped = _scrape(host_port)
            return scraped if total(scraped, "nefos_builds_total") > total(before, "nefos_builds_total") else None
        after = _until(counted, "the host to count its build", procs)

        def grew(metric: str, /, **labels) -> float:
            return total(after, metric, **labels) - total(before, metric, **labels)

        # The host's own figures: its build, its steps, its calls to the conductor; no database.
        assert grew("nefos_builds_total", result="success") == 1
        assert grew("nefos_instance_step_duration_seconds_count", step="compute_spawn", result="Success") == 1
        assert grew("nefos_bus_messages_total", direction="sent", topic="conductor", kind="call") >= 1
        assert total(after, "nefos_db_transaction_duration_seconds_count") == 0
        assert total(after, "nefos_hypervisor_usage", host="metered-1", resource="vcpus") > 0
        # The other API process answered no request: the create went to the first one.
        assert total(_scrape(api_port), "nefos_api_requests_total", route="/v2.1/servers", method="POST") == 0
