"""The compute host and its libvirtd: connection loss and recovery, a compute restart under running guests."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

from tests.libvirt.conftest import HOST, _libvirtd_answers, avirsh, make_network, wait_console, wait_domstate
from tests.clouds import ADMIN

PIDFILE = "/run/libvirtd.pid"

pytestmark = pytest.mark.libvirt


async def service(cloud, host: str = HOST) -> dict:
    r = await cloud.compute.get("/v2.1/os-services", params={"host": host, "binary": "nova-compute"},
                                headers=ADMIN)
    assert r.status_code == 200, r.text
    (svc,) = r.json()["services"]
    return svc


async def wait_service(cloud, status: str, timeout: float, reason_prefix: str | None = None) -> tuple[dict, float]:
    t0 = time.monotonic()
    while True:
        svc = await service(cloud)
        if svc["status"] == status and (reason_prefix is None or (svc["disabled_reason"] or "").startswith(reason_prefix)):
            return svc, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"service is {svc['status']} ({svc['disabled_reason']}), not {status} "
                                 f"within {timeout} s")
        await asyncio.sleep(0.1)


def _stop_libvirtd() -> None:
    with open(PIDFILE) as f:
        pid = int(f.read().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"libvirtd {pid} did not stop"
        time.sleep(0.05)


def _start_libvirtd() -> None:
    started = subprocess.run(["libvirtd", "-d"], capture_output=True, text=True)
    # The Tempest run with real guests (another unit of work, tests/tempest) starts libvirtd when it
    # finds it stopped (ensure_libvirtd): then this start finds it running, which is what it wants.
    assert started.returncode == 0 or _libvirtd_answers(), started.stderr


async def put_service(cloud, action: str, body: dict) -> None:
    r = await cloud.compute.put(f"/v2.1/os-services/{action}", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text


async def test_libvirtd_stopped_disables_the_host_and_back_enables_it(lvcloud):
    cloud = lvcloud
    assert (await service(cloud))["status"] == "enabled"
    try:
        await asyncio.to_thread(_stop_libvirtd)
        svc, took = await wait_service(cloud, "disabled", timeout=5, reason_prefix="AUTO: ")
        assert "libvirt" in svc["disabled_reason"], svc
        print(f"\nlibvirtd stopped -> disabled after {took:.2f} s ({svc['disabled_reason']})")
    finally:
        await asyncio.to_thread(_start_libvirtd)
    svc, took = await wait_service(cloud, "enabled", timeout=20)
    assert svc["disabled_reason"] is None
    print(f"libvirtd back -> enabled after {took:.2f} s")

    # An operator's disable is never undone by the driver, through a loss and a recovery.
    await put_service(cloud, "disable-log-reason", {"host": HOST, "binary": "nova-compute",
                                                    "disabled_reason": "maintenance"})
    try:
        await asyncio.to_thread(_stop_libvirtd)
        await asyncio.sleep(1.5)
        svc = await service(cloud)
        assert (svc["status"], svc["disabled_reason"]) == ("disabled", "maintenance")
    finally:
        await asyncio.to_thread(_start_libvirtd)
    driver = cloud.driver(HOST)
    deadline = time.monotonic() + 20
    while not driver._host.connected:
        assert time.monotonic() < deadline, "the driver did not reconnect"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    svc = await service(cloud)
    assert (svc["status"], svc["disabled_reason"]) == ("disabled", "maintenance")
    assert await driver.list_instance_uuids() is not None  # the new connection works


async def test_compute_restart_under_running_guests(lvcloud):
    """init_host reconciles: running guests keep running; a guest deleted meanwhile is destroyed."""
    from nefos.host.compute.service import ComputeComponent
    from nefos.host.virt import load_driver
    cloud = lvcloud
    net = await make_network(cloud, name="lv-net-3", cidr="10.79.0.0/24")
    ids = []
    for name in ("keep", "gone"):
        ids.append((await cloud.boot(name=name, flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"])
    keep, gone = ids
    for sid in ids:
        await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_console(cloud, keep, "NEFOS-MAC")
    domid = await avirsh("domid", keep)

    old = next(c for c in cloud.cloud.components if getattr(c, "host", None) == HOST and hasattr(c, "manager"))
    await old.stop()
    # Meanwhile one instance is deleted behind the host's back (as a local delete would).
    from nefos.objects import instance as instance_obj
    await instance_obj.destroy(cloud.rt.db, gone)
    await wait_domstate(gone, "running")  # nobody destroyed its guest yet

    new = ComputeComponent(cloud.rt, HOST, driver=load_driver("libvirt", cloud.rt.cfg, HOST))
    await new.start()
    for lst in (cloud.cloud.components, cloud.cloud._started):
        lst[lst.index(old)] = new

    await cloud.wait_gone(gone, timeout=30)
    assert gone not in await avirsh("list", "--all", "--uuid")
    assert not (new.driver.instances_path / gone).exists()
    server = await cloud.wait_status(keep, "ACTIVE")
    assert server["OS-EXT-STS:power_state"] == 1
    assert await avirsh("domid", keep) == domid  # the same QEMU process: never restarted
    assert (await avirsh("domstate", keep)) == "running"
    r = await cloud.compute.delete(f"/v2.1/servers/{keep}")
    assert r.status_code == 204
    await cloud.wait_gone(keep, timeout=30)
