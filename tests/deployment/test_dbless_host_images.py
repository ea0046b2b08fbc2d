"""A compute host with no database writes images through the Image API over HTTP (as Nova's
glance client does): createImage and shelve on a ``nefos compute`` with no database URL and a
state directory of its own (control plane in other processes over RabbitMQ and PostgreSQL)
upload their data, the images become active with their size, and unshelve deletes the shelved
image."""

from __future__ import annotations

import time

import httpx
import pytest

from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.deployment.test_dbless_compute import CONTROL_PLANE, _host_env
from tests.deployment.test_multiprocess import ADMIN, _wait, running_cloud

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


def _image_api(procs) -> httpx.Client:
    return httpx.Client(verify=verified_tls(),
                        base_url=f"http://127.0.0.1:{procs.env['NEFOS_IMAGE_API_PORT']}", timeout=30,
                        headers=ADMIN)


def _wait_image(images: httpx.Client, image_id: str, status: str | None, procs, timeout=60) -> dict | None:
    deadline = time.monotonic() + timeout
    while True:
        r = images.get(f"/v2/images/{image_id}")
        if status is None and r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        if r.json()["status"] == status:
            return r.json()
        assert r.json()["status"] in ("queued", "saving", "active"), r.json()
        assert time.monotonic() < deadline, f"{r.json()['status']} != {status}\n{procs.logs()}"
        time.sleep(0.2)


def test_snapshot_and_shelve_on_a_host_without_a_database(tmp_path):
    host_state = tmp_path / "dbless-host"
    host_state.mkdir()
    control_state = tmp_path / "control"
    control_state.mkdir()
    with running_cloud("postgresql", control_state, CONTROL_PLANE, hypervisors=0) as (compute, network, procs):
        procs.start(["compute", "--host", "dbless-img"], env=_host_env(procs.env), state=host_state)
        deadline = time.monotonic() + 60
        while not any(h["hypervisor_hostname"] == "dbless-img"
                      for h in compute.get("/v2.1/os-hypervisors").json()["hypervisors"]):
            procs.check_alive()
            assert time.monotonic() < deadline, procs.logs()
            time.sleep(0.5)
        net_id = network.post("/v2.0/networks", json={"network": {"name": "img-net"}}).json()["network"]["id"]
        r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.29.0.0/24",
                                                           "ip_version": 4}})
        assert r.status_code == 201, r.text
        r = compute.post("/v2.1/servers", json={"server": {
            "name": "img", "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}],
            "availability_zone": "nova:dbless-img"}})
        assert r.status_code == 202, r.text
        server_id = r.json()["server"]["id"]
        _wait(compute, server_id, "ACTIVE", procs)
        images = _image_api(procs)

        r = compute.post(f"/v2.1/servers/{server_id}/action", json={"createImage": {"name": "snap"}},
                         headers={"X-OpenStack-Nova-API-Version": "2.45"})
        assert r.status_code == 202, r.text
        snapshot_id = r.json()["image_id"]
        snapshot = _wait_image(images, snapshot_id, "active", procs)
        assert snapshot["size"] and snapshot["size"] > 0, snapshot
        assert images.get(f"/v2/images/{snapshot_id}/file").content.__len__() == snapshot["size"]
        _wait(compute, server_id, "ACTIVE", procs)

        r = compute.post(f"/v2.1/servers/{server_id}/action", json={"shelve": None})
        assert r.status_code == 202, r.text
        server = _wait(compute, server_id, "SHELVED_OFFLOADED", procs)
        shelved = images.get("/v2/images", params={"name": "img-shelved"}).json()["images"]
        assert len(shelved) == 1 and shelved[0]["status"] == "active" and shelved[0]["size"] > 0, shelved
        r = compute.post(f"/v2.1/servers/{server_id}/action", json={"unshelve": None})
        assert r.status_code == 202, r.text
        server = _wait(compute, server_id, "ACTIVE", procs)
        assert server["OS-EXT-SRV-ATTR:host"] == "dbless-img"
        _wait_image(images, shelved[0]["id"], None, procs)  # the shelved image served its purpose
        procs.check_alive()
        images.close()
