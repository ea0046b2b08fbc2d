"""The compute host and its libvirtd: connection loss and recovery, a compute restart under running guests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.libvirt.conftest import (HOST, avirsh, make_network, start_libvirt_cloud, stop_libvirt_cloud,
                                    wait_console, wait_domstate)
from tests.clouds import ADMIN
from tests.eventually import eventually
from tests.relay import Relay

pytestmark = pytest.mark.libvirt

LIBVIRTD_SOCKET = "/run/libvirt/libvirt-sock"


class LibvirtdRelay(Relay):
    """A Unix socket in front of libvirtd's that the test can cut and restore.

    The host's libvirtd serves other units' real guests at the same time (the Tempest run with
    validation), and a compute host that loses libvirtd disables itself: stopping the daemon would
    make their boots "No valid host". Cut here, the compute host sees what a stopped libvirtd
    gives it (its connection closed, new connections refused) and nobody else notices.
    """

    def __init__(self, path: Path):
        super().__init__(lambda: asyncio.open_unix_connection(LIBVIRTD_SOCKET), name="libvirtd-relay")
        self.path = path

    @property
    def uri(self) -> str:
        return f"qemu+unix:///system?socket={self.path}"

    def open(self) -> None:
        self.call(self.serve(asyncio.start_unix_server, path=str(self.path)))

    def cut(self) -> None:
        """As libvirtd stopping: the connections through the relay close, its socket goes."""
        super().cut()
        self.path.unlink(missing_ok=True)


@pytest.fixture
async def relayed_cloud(libvirtd, tmp_path):
    """A libvirt cloud whose compute host reaches libvirtd through a ``LibvirtdRelay``."""
    relay = LibvirtdRelay(tmp_path / "libvirt-sock")
    relay.open()
    harness = await start_libvirt_cloud(tmp_path, connection_uri=relay.uri)
    harness.relay = relay
    try:
        yield harness
    finally:
        relay.close()
        await stop_libvirt_cloud(harness)


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


async def put_service(cloud, action: str, body: dict) -> None:
    r = await cloud.compute.put(f"/v2.1/os-services/{action}", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text


async def test_libvirtd_lost_disables_the_host_and_back_enables_it(relayed_cloud):
    cloud = relayed_cloud
    assert (await service(cloud))["status"] == "enabled"
    try:
        await asyncio.to_thread(cloud.relay.cut)
        svc, took = await wait_service(cloud, "disabled", timeout=5, reason_prefix="AUTO: ")
        assert "libvirt" in svc["disabled_reason"], svc
        print(f"\nlibvirtd gone -> disabled after {took:.2f} s ({svc['disabled_reason']})")
    finally:
        await asyncio.to_thread(cloud.relay.open)
    svc, took = await wait_service(cloud, "enabled", timeout=20)
    assert svc["disabled_reason"] is None
    print(f"libvirtd back -> enabled after {took:.2f} s")

    # An operator's disable is never undone by the driver, through a loss and a recovery.
    await put_service(cloud, "disable-log-reason", {"host": HOST, "binary": "nova-compute",
                                                    "disabled_reason": "maintenance"})
    driver = cloud.driver(HOST)
    try:
        await asyncio.to_thread(cloud.relay.cut)
        await eventually(lambda: not driver._host.connected, timeout=5)
        svc = await service(cloud)
        assert (svc["status"], svc["disabled_reason"]) == ("disabled", "maintenance")
    finally:
        await asyncio.to_thread(cloud.relay.open)
    await eventually(lambda: driver._host.connected, timeout=20)
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
