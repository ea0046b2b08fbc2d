"""APIs Nova removed answer 410 Gone at every microversion, as Nova's ``removed`` controllers."""

from __future__ import annotations

import pytest

from nefos.control.compute.rest.removed import REMOVED_ROUTES
from tests.clouds import start_cloud, stop_cloud

ADMIN = {"X-Project-Id": "a" * 32, "X-User-Id": "b" * 32, "X-Roles": "admin,member,reader"}
MEMBER = {"X-Project-Id": "a" * 32, "X-User-Id": "c" * 32, "X-Roles": "member,reader"}
GONE = {"computeFault": {"code": 410, "message":
                         "This resource is no longer available.  No forwarding address is given."}}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path)
    yield harness
    await stop_cloud(harness)


async def test_every_removed_api_is_410_gone_for_everyone_at_every_microversion(cloud):
    assert len(REMOVED_ROUTES) >= 20
    for path, methods in REMOVED_ROUTES:
        url = path.format(id="1", server_id="s" * 8, domain_id="example.org")
        for method in methods:
            for headers, mv in ((MEMBER, "2.1"), (ADMIN, "2.1"), (MEMBER, "latest")):
                r = await cloud.compute.request(method, url, headers={**headers, "OpenStack-API-Version":
                                                                      f"compute {mv}"},
                                                json={} if method in ("POST", "PUT") else None)
                assert r.status_code == 410, (method, url, r.text)


async def test_the_gone_answer_is_novas(cloud):
    r = await cloud.compute.get("/v2.1/os-fping", headers=MEMBER)
    assert r.status_code == 410 and r.json() == GONE, r.text
    r = await cloud.compute.post("/v2.1/os-cells/sync_instances", json={}, headers=ADMIN)
    assert r.status_code == 410, r.text
    r = await cloud.compute.get("/v2.1/os-networks", headers=MEMBER)  # a proxy API: not in this list
    assert r.status_code != 410, r.text


async def test_a_fixed_ip_action_is_gone_only_for_the_actions_nova_had(cloud):
    for action in ("reserve", "unreserve"):
        r = await cloud.compute.post("/v2.1/os-fixed-ips/10.0.0.5/action", json={action: None}, headers=ADMIN)
        assert r.status_code == 410 and r.json() == GONE, r.text
    r = await cloud.compute.post("/v2.1/os-fixed-ips/10.0.0.5/action", json={"bogus": None}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "There is no such action: bogus", r.text
    r = await cloud.compute.post("/v2.1/os-fixed-ips/10.0.0.5/action", json={}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Malformed request body", r.text
    r = await cloud.compute.post("/v2.1/servers/x/action", json={"bogus": None}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "There is no such action: bogus", r.text
    r = await cloud.compute.post("/v2.1/servers/x/action", json={"a": 1, "b": 2}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["badRequest"]["message"] == "Malformed request body", r.text
