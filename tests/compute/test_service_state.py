"""A compute host disables its own service while its hypervisor connection is down (Nova's auto-disable)."""

from __future__ import annotations

from nefos.objects import service_rows as service_state
from tests.compute.conftest import FAST, boot_active, crash_compute, eventually, start_compute
from tests.clouds import ADMIN, member


async def service(cloud, host: str) -> dict:
    r = await cloud.compute.get("/v2.1/os-services", params={"host": host, "binary": "nova-compute"},
                                headers=ADMIN)
    assert r.status_code == 200, r.text
    (svc,) = r.json()["services"]
    return svc


async def wait_service(cloud, host: str, status: str, reason=...) -> dict:
    async def check():
        svc = await service(cloud, host)
        if svc["status"] == status and (reason is ... or svc["disabled_reason"] == reason):
            return svc
        return None
    return await eventually(check, timeout=2)


async def put_service(cloud, action: str, body: dict) -> None:
    r = await cloud.compute.put(f"/v2.1/os-services/{action}", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text


async def test_connection_loss_disables_and_recovery_enables(cloud):
    driver = cloud.driver("host-1")
    assert (await service(cloud, "host-1"))["status"] == "enabled"
    driver.simulate_connection_loss("Connection to libvirt lost: 1")
    svc = await wait_service(cloud, "host-1", "disabled")
    assert svc["disabled_reason"] == "AUTO: Connection to libvirt lost: 1"
    assert svc["state"] == "up"  # the process is alive; only the hypervisor is not
    driver.simulate_connection_restored()
    svc = await wait_service(cloud, "host-1", "enabled")
    assert svc["disabled_reason"] is None


async def test_scheduler_avoids_the_disabled_host(cloud2):
    cloud2.driver("host-1").simulate_connection_loss("hypervisor gone")
    await wait_service(cloud2, "host-1", "disabled")
    ids = await boot_active(cloud2, count=4)
    hosts = {(await cloud2.server(i))["OS-EXT-SRV-ATTR:host"] for i in ids}
    assert hosts == {"host-2"}
    cloud2.driver("host-1").simulate_connection_restored()
    await wait_service(cloud2, "host-1", "enabled")
    ids = await boot_active(cloud2, count=1, host="host-1")
    assert (await cloud2.server(ids[0]))["OS-EXT-SRV-ATTR:host"] == "host-1"


async def test_a_manual_disable_survives_loss_and_recovery(cloud):
    driver = cloud.driver("host-1")
    await put_service(cloud, "disable-log-reason", {"host": "host-1", "binary": "nova-compute",
                                                    "disabled_reason": "maintenance"})
    driver.simulate_connection_loss("link down")
    driver.simulate_connection_restored()
    driver.simulate_connection_loss("link down again")
    driver.simulate_connection_restored()
    manager_handler = cloud.compute_manager("host-1").lifecycle
    await eventually(lambda: _idle(manager_handler))
    svc = await service(cloud, "host-1")
    assert (svc["status"], svc["disabled_reason"]) == ("disabled", "maintenance")
    # The operator's enable is the only way back.
    await put_service(cloud, "enable", {"host": "host-1", "binary": "nova-compute"})
    assert (await service(cloud, "host-1"))["status"] == "enabled"


async def _idle(handler):
    return not handler._tasks


async def test_an_operator_disable_during_the_outage_is_kept(cloud):
    driver = cloud.driver("host-1")
    driver.simulate_connection_loss("link down")
    await wait_service(cloud, "host-1", "disabled", "AUTO: link down")
    # The operator takes over while the link is down: recovery must not re-enable.
    await put_service(cloud, "disable-log-reason", {"host": "host-1", "binary": "nova-compute",
                                                    "disabled_reason": "keep it off"})
    driver.simulate_connection_restored()
    await eventually(lambda: _idle(cloud.compute_manager("host-1").lifecycle))
    svc = await service(cloud, "host-1")
    assert (svc["status"], svc["disabled_reason"]) == ("disabled", "keep it off")


async def test_conditional_updates_never_override_an_operator(cloud):
    db = cloud.rt.db
    await put_service(cloud, "disable-log-reason", {"host": "host-1", "binary": "nova-compute",
                                                    "disabled_reason": "AUTO: looks automatic"})
    # Even a reason that looks automatic is the operator's: disabled_by says who did it.
    assert not await service_state.set_host_enabled(db, "host-1", True)
    assert not await service_state.set_host_enabled(db, "host-1", False, "lost")
    assert (await service(cloud, "host-1"))["disabled_reason"] == "AUTO: looks automatic"
    await put_service(cloud, "enable", {"host": "host-1", "binary": "nova-compute"})
    assert await service_state.set_host_enabled(db, "host-1", False, "lost")
    assert await service_state.set_host_enabled(db, "host-1", False, "still lost")  # reason refreshed
    assert (await service(cloud, "host-1"))["disabled_reason"] == "AUTO: still lost"
    assert await service_state.set_host_enabled(db, "host-1", True)
    assert not await service_state.set_host_enabled(db, "host-1", True)
    assert not await service_state.set_host_enabled(db, "no-such-host", False, "x")


async def test_restart_reports_the_connection_state(cloud):
    driver = cloud.driver("host-1")
    driver.simulate_connection_loss("link down")
    await wait_service(cloud, "host-1", "disabled")
    # The compute process restarts while the link is still down: it stays disabled ...
    old = await crash_compute(cloud, "host-1")
    old = await start_compute(cloud, old)
    await wait_service(cloud, "host-1", "disabled", "AUTO: link down")
    # ... the link comes back while compute is down (nobody listens) ...
    old = await crash_compute(cloud, "host-1")
    driver.simulate_connection_restored()
    assert (await service(cloud, "host-1"))["status"] == "disabled"
    # ... and the next start, finding the hypervisor reachable, enables it.
    await start_compute(cloud, old)
    await wait_service(cloud, "host-1", "enabled")


async def test_first_start_with_the_hypervisor_down_disables(tmp_path):
    """No service row exists while init_host runs on a fresh host: the state is applied once it does."""
    from nefos.host.compute.service import ComputeComponent
    from nefos.host.virt.fake import FakeDriver
    from tests.clouds import start_cloud, stop_cloud
    harness = await start_cloud(tmp_path, fake_hosts=1, lifecycle_stopped_delay=0,
                                sync_power_state_interval=-1)
    try:
        driver = FakeDriver(harness.rt.cfg, "host-9")
        driver.connected, driver.disconnect_reason = False, "no hypervisor yet"
        component = ComputeComponent(harness.rt, "host-9", driver=driver)
        harness.cloud.components.append(component)
        await component.start()
        harness.cloud._started.append(component)
        svc = await wait_service(harness, "host-9", "disabled")
        assert svc["disabled_reason"] == "AUTO: no hypervisor yet"
    finally:
        await stop_cloud(harness)


async def health(cloud, host: str) -> dict:
    r = await cloud.compute.get("/v2.1/nefos-hypervisor-health", headers=ADMIN)
    assert r.status_code == 200, r.text
    return next(h for h in r.json()["hypervisor_health"] if h["host"] == host)


async def test_hypervisor_health_is_reported_apart_from_heartbeat_and_operator_disable(cloud):
    driver = cloud.driver("host-1")
    await eventually(lambda: _connection_is(cloud, "connected"), timeout=2)
    first = await health(cloud, "host-1")
    assert first["state"] == "up" and first["hypervisor_connection_reason"] is None
    # An operator's disable hides the AUTO: reason; the connection is still visible, apart.
    await put_service(cloud, "disable-log-reason", {"host": "host-1", "binary": "nova-compute",
                                                    "disabled_reason": "maintenance"})
    driver.simulate_connection_loss("Connection to libvirt lost: 1")
    lost = await eventually(lambda: _connection_is(cloud, "disconnected"), timeout=2)
    assert (lost["state"], lost["status"], lost["disabled_reason"]) == ("up", "disabled", "maintenance")
    assert lost["hypervisor_connection_reason"] == "Connection to libvirt lost: 1"
    assert lost["hypervisor_connection_since"] >= first["hypervisor_connection_since"]
    driver.simulate_connection_restored()
    back = await eventually(lambda: _connection_is(cloud, "connected"), timeout=2)
    assert back["hypervisor_connection_reason"] is None and back["disabled_reason"] == "maintenance"
    # Only admins see it.
    r = await cloud.compute.get("/v2.1/nefos-hypervisor-health", headers=member())
    assert r.status_code == 403 and "forbidden" in r.json()


async def _connection_is(cloud, state: str):
    h = await health(cloud, "host-1")
    return h if h["hypervisor_connection"] == state else None


async def test_vif_plugging_waits_are_published_so_a_slow_agent_is_visible(tmp_path):
    from tests.clouds import start_cloud, stop_cloud
    cloud = await start_cloud(tmp_path, fake_hosts=1, fake_l2_agent_delay=0.4, **FAST)
    try:
        await boot_active(cloud, count=3)
        waits = (await eventually(lambda: _waits(cloud, 3), timeout=5))["vif_plugging_waits"]
        assert waits["count"] == 3 and waits["timeouts"] == 0 and waits["failed"] == 0
        # The agent's 0.4 s delay is what the builds waited for: visible without any timeout.
        assert 0.4 <= waits["p50_seconds"] <= waits["max_seconds"] < 5
    finally:
        await stop_cloud(cloud)


async def _waits(cloud, count: int):
    h = await health(cloud, "host-1")
    return h if (h["vif_plugging_waits"] or {}).get("count") == count else None
