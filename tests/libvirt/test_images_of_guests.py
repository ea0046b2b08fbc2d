"""A real guest's disk as an image: createImage of a running guest (paused for the copy), rebuild
from that snapshot, shelve (offloaded: the domain is gone) and unshelve onto the host again."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.libvirt.conftest import HOST, avirsh, make_network, wait_console, wait_domstate
from tests.noauth import ADMIN
from nefos.http_client import verified_tls

pytestmark = pytest.mark.libvirt
V245 = {"OpenStack-API-Version": "compute 2.45"}


async def _active_image(cloud, image_id: str, timeout: float = 120) -> dict:
    async with httpx.AsyncClient(verify=verified_tls(),
                                 base_url=f"http://127.0.0.1:{cloud.rt.cfg.image_api_port}", headers=ADMIN) as images:
        deadline = time.monotonic() + timeout
        while True:
            image = (await images.get(f"/v2/images/{image_id}")).json()
            if image["status"] == "active":
                return image
            assert image["status"] in ("queued", "saving") and time.monotonic() < deadline, image
            await asyncio.sleep(0.2)


async def test_snapshot_rebuild_shelve_and_unshelve_a_real_guest(lvcloud):
    cloud = lvcloud
    net = await make_network(cloud, name="img-net", cidr="10.78.0.0/24")
    sid = (await cloud.boot(name="img-1", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_console(cloud, sid, "NEFOS-IP:")

    r = await cloud.action(sid, {"createImage": {"name": "img-1-snap"}}, headers=V245)
    snap = await _active_image(cloud, r.json()["image_id"])
    assert snap["disk_format"] == "qcow2" and snap["size"] > 0 and snap["instance_uuid"] == sid
    await cloud.wait_status(sid, "ACTIVE")
    await wait_domstate(sid, "running")  # resumed after the copy

    await cloud.action(sid, {"rebuild": {"imageRef": snap["id"]}})
    server = await cloud.wait_status(sid, "ACTIVE", timeout=120)
    assert server["image"]["id"] == snap["id"]
    await wait_console(cloud, sid, "NEFOS-IP:")  # the rebuilt guest booted from the snapshot

    await cloud.action(sid, {"shelve": None})
    server = await cloud.wait_status(sid, "SHELVED_OFFLOADED", timeout=120)
    assert server["OS-EXT-SRV-ATTR:host"] is None
    assert "failed to get domain" in (await avirsh("domstate", sid, check=False)).lower() or \
        not (await avirsh("list", "--all", "--uuid")).count(sid)
    await cloud.action(sid, {"unshelve": None})
    server = await cloud.wait_status(sid, "ACTIVE", timeout=120)
    assert server["OS-EXT-SRV-ATTR:host"] == HOST
    await wait_console(cloud, sid, "NEFOS-IP:")
    assert (await cloud.compute.delete(f"/v2.1/servers/{sid}")).status_code == 204
    await cloud.wait_gone(sid, timeout=60)
