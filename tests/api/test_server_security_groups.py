"""addSecurityGroup / removeSecurityGroup: the group goes on or off every port of the server (where
the dataplane enforces it) and into or out of the server's view."""

from __future__ import annotations

from tests.compute.conftest import boot_active
from tests.clouds import start_cloud, stop_cloud

import pytest


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1)
    yield harness
    await stop_cloud(harness)


async def _group(cloud, name: str) -> dict:
    r = await cloud.network.post("/v2.0/security-groups", json={"security_group": {"name": name}})
    assert r.status_code == 201, r.text
    return r.json()["security_group"]


async def test_add_and_remove_a_security_group(cloud):
    (server_id,) = await boot_active(cloud)
    web = await _group(cloud, "web")
    await cloud.action(server_id, {"addSecurityGroup": {"name": "web"}})
    (port,) = await cloud.ports(device_id=server_id)
    assert web["id"] in port["security_groups"] and len(port["security_groups"]) == 2
    assert {g["name"] for g in (await cloud.server(server_id))["security_groups"]} == {"default", "web"}
    r = await cloud.action(server_id, {"addSecurityGroup": {"name": "web"}}, expect=400)  # already on
    assert "already associated" in r.json()["badRequest"]["message"]
    for name in ("web", "default"):
        await cloud.action(server_id, {"removeSecurityGroup": {"name": name}})
    (port,) = await cloud.ports(device_id=server_id)
    assert port["security_groups"] == []
    assert "security_groups" not in await cloud.server(server_id)  # as Nova: no groups, no key
    await cloud.action(server_id, {"removeSecurityGroup": {"name": "web"}}, expect=400)  # not on it


async def test_bad_security_group_actions(cloud):
    (server_id,) = await boot_active(cloud)
    await cloud.action(server_id, {"addSecurityGroup": {"name": "nope"}}, expect=404)
    await cloud.action(server_id, {"addSecurityGroup": {}}, expect=400)
    await cloud.action(server_id, {"removeSecurityGroup": None}, expect=400)
    await cloud.action("00000000-0000-0000-0000-000000000000", {"addSecurityGroup": {"name": "default"}},
                       expect=404)
