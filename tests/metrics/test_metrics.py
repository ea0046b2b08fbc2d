"""Every process's /metrics and /healthcheck (nefos.metrics), read as an operator's tools read them.

The metrics live in the process's registry, which other clouds of this test process share: each
check compares a figure before and after the test's own work.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nefos.cmd.allinone import free_port
from nefos.config import load_config
from nefos.http_client import verified_tls
from tests.compute.conftest import boot_active
from tests.clouds import start_cloud, stop_cloud


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of a /metrics page."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict, metric: str, /, **labels) -> float:
    """The sum of ``metric``'s samples whose labels include ``labels``."""
    return sum(value for (sample, have), value in found.items()
               if sample == metric and set(labels.items()) <= set(have))


async def scrape(port: int) -> dict:
    async with httpx.AsyncClient(verify=verified_tls()) as client:
        r = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, metrics_port=free_port())
    yield harness
    await stop_cloud(harness)


async def test_a_boot_shows_in_the_metrics(cloud):
    port = cloud.rt.cfg.metrics_port
    before = await scrape(port)
    [server_id] = await boot_active(cloud)
    after = await scrape(port)

    def grew(metric: str, /, **labels) -> float:
        return total(after, metric, **labels) - total(before, metric, **labels)

    # The API: the create counted by its route's template and status, and timed.
    assert grew("nefos_api_requests_total", service="compute", method="POST", route="/v2.1/servers",
                status="202") == 1
    assert grew("nefos_api_request_duration_seconds_count", service="compute", method="POST",
                route="/v2.1/servers") == 1
    assert grew("nefos_api_request_duration_seconds_bucket", service="compute", method="POST",
                route="/v2.1/servers", le="+Inf") == 1
    # Never a label per path: the server's id is nowhere in the labels.
    assert not any(server_id in str(labels) for (_name, labels) in after)
    # The build: its result, its steps, the wait for network-vif-plugged and the event's delivery.
    assert grew("nefos_builds_total", result="success") == 1
    for step in ("compute_claim_resources", "compute_allocate_network", "compute_prep_block_device",
                 "compute_spawn"):
        assert grew("nefos_instance_step_duration_seconds_count", step=step, result="Success") == 1, step
    assert grew("nefos_vif_wait_duration_seconds_count", outcome="ok") == 1
    assert grew("nefos_external_event_delivery_seconds_count", name="network-vif-plugged") >= 1
    # The scheduler, the bus, the database.
    assert grew("nefos_scheduler_decisions_total", result="placed") == 1
    assert grew("nefos_scheduler_decision_duration_seconds_count") == 1
    assert grew("nefos_bus_messages_total", direction="sent", topic="compute", kind="cast") >= 1
    assert grew("nefos_bus_messages_total", direction="received", topic="conductor", kind="call") >= 1
    assert grew("nefos_db_transaction_duration_seconds_count") > 0
    # The host's node as it last reported it.
    assert total(after, "nefos_hypervisor_usage", host="host-1", resource="vcpus") > 0


async def test_a_refused_request_counts_under_no_path_of_its_own(cloud):
    port = cloud.rt.cfg.metrics_port
    before = await scrape(port)
    r = await cloud.compute.get("/v2.1/no-such-thing/12345")
    assert r.status_code == 404
    r = await cloud.compute.get("/v2.1/servers/not-a-server")
    assert r.status_code == 404
    after = await scrape(port)
    assert total(after, "nefos_api_requests_total", route="unmatched", status="404") - \
        total(before, "nefos_api_requests_total", route="unmatched", status="404") == 1
    assert total(after, "nefos_api_requests_total", route="/v2.1/servers/{server_id}", status="404") - \
        total(before, "nefos_api_requests_total", route="/v2.1/servers/{server_id}", status="404") == 1
    assert not any("12345" in str(labels) or "not-a-server" in str(labels) for (_name, labels) in after)


async def test_metrics_are_on_the_operator_listener_only(cloud):
    """Not on the APIs' ports, which tenants reach: the figures name hosts and routes."""
    cfg = cloud.rt.cfg
    async with httpx.AsyncClient(verify=verified_tls()) as client:
        for port in (cfg.compute_api_port, cfg.network_api_port, cfg.image_api_port, cfg.identity_api_port):
            r = await client.get(f"http://127.0.0.1:{port}/metrics")
            assert r.status_code in (401, 404), (port, r.status_code)
            assert "nefos_" not in r.text
    assert cloud.cloud.endpoints()["metrics"] == f"http://127.0.0.1:{cfg.metrics_port}/metrics"


async def test_healthcheck_on_every_api_and_the_operator_listener(cloud, tmp_path):
    cfg = cloud.rt.cfg
    ports = (cfg.compute_api_port, cfg.network_api_port, cfg.image_api_port, cfg.identity_api_port,
             cfg.metrics_port)
    async with httpx.AsyncClient(verify=verified_tls()) as client:  # no token, no noauth headers
        for port in ports:
            r = await client.get(f"http://127.0.0.1:{port}/healthcheck")
            assert (r.status_code, r.text) == (200, "OK"), port
            r = await client.head(f"http://127.0.0.1:{port}/healthcheck")
            assert (r.status_code, r.text) == (200, ""), port
            r = await client.post(f"http://127.0.0.1:{port}/healthcheck")
            assert r.status_code == 405, port
        # oslo.middleware's disable_by_file: an operator takes the process out of its load balancer.
        flag = tmp_path / "disabled"
        cfg.healthcheck_disable_by_file_path = str(flag)
        flag.write_text("")
        for port in ports:
            r = await client.get(f"http://127.0.0.1:{port}/healthcheck")
            assert (r.status_code, r.text) == (503, "DISABLED BY FILE"), port
        flag.unlink()
        for port in ports:
            r = await client.get(f"http://127.0.0.1:{port}/healthcheck")
            assert r.status_code == 200, port


def test_no_operator_listener_unless_configured(tmp_path):
    cfg = load_config(state_dir=tmp_path)
    assert cfg.metrics_port == 0
    assert cfg.metrics_bind == "127.0.0.1"


async def test_hosts_up_down_and_disabled_show_in_the_metrics(cloud):
    """What os-services says of each service, at each scrape: up, disabled by an operator, disabled
    by itself (AUTO: its hypervisor connection lost) and back, forced down."""
    from tests.compute.test_service_state import put_service, wait_service
    from tests.clouds import ADMIN
    port = cloud.rt.cfg.metrics_port

    async def gauges() -> tuple[float, float, float]:
        found = await scrape(port)
        return (total(found, "nefos_service_up", binary="nova-compute", host="host-1"),
                total(found, "nefos_service_disabled", binary="nova-compute", host="host-1", auto="false"),
                total(found, "nefos_service_disabled", binary="nova-compute", host="host-1", auto="true"))

    assert await gauges() == (1, 0, 0)
    driver = cloud.driver("host-1")
    driver.simulate_connection_loss("link down")
    await wait_service(cloud, "host-1", "disabled", "AUTO: link down")
    assert await gauges() == (1, 0, 1)
    driver.simulate_connection_restored()
    await wait_service(cloud, "host-1", "enabled")
    assert await gauges() == (1, 0, 0)
    await put_service(cloud, "disable-log-reason", {"host": "host-1", "binary": "nova-compute",
                                                    "disabled_reason": "maintenance"})
    assert await gauges() == (1, 1, 0)
    r = await cloud.compute.put("/v2.1/os-services/force-down",
                                headers={**ADMIN, "OpenStack-API-Version": "compute 2.11"},
                                json={"host": "host-1", "binary": "nova-compute", "forced_down": True})
    assert r.status_code == 200, r.text
    assert (await gauges())[0] == 0
