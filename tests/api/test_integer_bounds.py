"""Integers beyond what the database holds are 400 in every API's own error body, never a 500
from the driver (SQLite, PostgreSQL and MySQL integers are at most 64 bits; image min_ram and
min_disk are 32-bit columns, as in Glance)."""

from __future__ import annotations

import httpx
import pytest

from tests.noauth import ADMIN
from nefos.http_client import verified_tls

HUGE = "99999999999999999999999"
JUST_OVER = str(2 ** 63)

COMPUTE_QUERIES = ["/v2.1/servers?limit={n}", "/v2.1/servers/detail?limit={n}", "/v2.1/flavors?minRam={n}",
                   "/v2.1/flavors?minDisk={n}", "/v2.1/flavors/detail?limit={n}", "/v2.1/os-keypairs?limit={n}",
                   "/v2.1/os-hypervisors?limit={n}", "/v2.1/os-server-groups?limit={n}"]
NETWORK_QUERIES = ["/v2.0/networks?limit={n}", "/v2.0/ports?limit={n}"]
IMAGE_QUERIES = ["/v2/images?limit={n}", "/v2/images?size_min={n}", "/v2/images?size_max={n}"]


@pytest.mark.parametrize("number", [HUGE, JUST_OVER, "-" + HUGE])
async def test_query_integers_beyond_64_bits_are_400(cloud, number):
    images = httpx.AsyncClient(verify=verified_tls(),
                               base_url=f"http://127.0.0.1:{cloud.rt.cfg.image_api_port}", headers=ADMIN)
    try:
        for client, paths in ((cloud.compute, COMPUTE_QUERIES), (cloud.network, NETWORK_QUERIES),
                              (images, IMAGE_QUERIES)):
            for path in paths:
                r = await client.get(path.format(n=number), headers={**ADMIN, "OpenStack-API-Version": "compute 2.64"})
                assert r.status_code == 400, (path, number, r.status_code, r.text[:200])
    finally:
        await images.aclose()


async def test_a_limit_within_64_bits_is_capped_not_refused(cloud):
    r = await cloud.compute.get(f"/v2.1/servers?limit={2 ** 63 - 1}")
    assert r.status_code == 200, r.text
    r = await cloud.compute.get(f"/v2.1/flavors?minRam={2 ** 63 - 1}")
    assert r.status_code == 200 and r.json()["flavors"] == []


async def test_body_integers_beyond_their_columns_are_400(cloud):
    big = int(HUGE)
    project = ADMIN["X-Project-Id"]
    for method, path, body in [
        ("PUT", f"/v2.1/os-quota-sets/{project}", {"quota_set": {"instances": big}}),
        ("POST", "/v2.1/flavors", {"flavor": {"name": "f", "ram": big, "vcpus": 1, "disk": 1}}),
        ("POST", "/v2.1/os-server-groups", {"server_group": {"name": "g", "policy": "anti-affinity",
                                                             "rules": {"max_server_per_host": big}}}),
    ]:
        r = await cloud.compute.request(method, path, json=body, headers={**ADMIN, "OpenStack-API-Version": "compute 2.64"})
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
    r = await cloud.network.post("/v2.0/networks", json={"network": {"name": "n", "mtu": big}})
    assert r.status_code == 400 and "NeutronError" in r.json()
    async with httpx.AsyncClient(verify=verified_tls(),
                                 base_url=f"http://127.0.0.1:{cloud.rt.cfg.image_api_port}", headers=ADMIN) as images:
        for body in ({"name": "i", "min_ram": big}, {"name": "i", "min_disk": 2 ** 31}):
            r = await images.post("/v2/images", json=body)
            assert r.status_code == 400, (body, r.status_code, r.text[:200])
        r = await images.post("/v2/images", json={"name": "ok", "min_ram": 2 ** 31 - 1})
        assert r.status_code == 201, r.text
        image = r.json()["id"]
        r = await images.patch(f"/v2/images/{image}", json=[{"op": "replace", "path": "/min_disk", "value": big}],
                               headers={"Content-Type": "application/openstack-images-v2.1-json-patch"})
        assert r.status_code == 400, r.text[:200]
