"""VNIs under concurrent network creation: two network service processes on one PostgreSQL or
MariaDB database (on SQLite one process serialises every write, so the race cannot occur there).
Each network gets a VNI of its own; a creation that lost the race for the lowest free one takes
the next (the unique key on the segment decides), none fails."""

from __future__ import annotations

import asyncio

import httpx

from tests.noauth import ADMIN
from tests.deployment.test_multiprocess_races import two_network_services  # noqa: F401 (a fixture)
from nefos.http_client import verified_tls


async def test_networks_created_at_once_get_distinct_vnis(two_network_services):  # noqa: F811
    urls, _db_url, _procs = two_network_services
    clients = [httpx.AsyncClient(verify=verified_tls(), base_url=url, headers=ADMIN, timeout=120) for url in urls]
    try:
        answers = await asyncio.gather(*[
            clients[i % 2].post("/v2.0/networks", json={"network": {"name": f"race-{i}"}}) for i in range(30)])
        assert [a.status_code for a in answers] == [201] * 30, [a.text for a in answers if a.status_code != 201]
        nets = [a.json()["network"] for a in answers]
        assert {n["provider:network_type"] for n in nets} == {"vxlan"}
        vnis = [n["provider:segmentation_id"] for n in nets]
        assert len(set(vnis)) == 30 and sorted(vnis) == list(range(1, 31))
        asked = await clients[0].post("/v2.0/networks", json={"network": {
            "name": "taken", "provider:network_type": "vxlan", "provider:segmentation_id": vnis[0]}})
        assert asked.status_code == 409, asked.text
    finally:
        for c in clients:
            await c.aclose()
