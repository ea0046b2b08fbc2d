"""A server's name is Nova's ``name`` parameter type on create, update and rebuild: printable
characters only (no control, format, surrogate or private-use character, no line or paragraph
separator, nothing outside the Basic Multilingual Plane), not starting or ending with whitespace.
Anything else is 400 with Nova's message, and nothing is created or changed: a tenant cannot put
terminal escapes, line breaks or direction overrides into what an operator's tools print.
"""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.clouds import member, start_cloud, stop_cloud

pytestmark = pytest.mark.asyncio(loop_scope="module")

TENANT = member("e" * 32, "f" * 32)
NOVA_MESSAGE = ("An invalid 'name' value was provided. The name must be: printable characters. "
                "Can not start or end with whitespace.")

REFUSED = {
    "escape": "vm\x1b]0;owned\x07\x1b[2J",
    "newline": "vm\nforged log line",
    "carriage-return": "vm\rroot",
    "tab": "vm\tvm",
    "nul": "vm\x00",
    "delete": "vm\x7f",
    "c1-control": "vm\x85next",
    "right-to-left-override": "vm\u202egpj.exe",
    "zero-width-space": "vm\u200b",
    "line-separator": "vm\u2028vm",
    "paragraph-separator": "vm\u2029vm",
    "private-use": "vm\ue000",
    "outside-the-bmp": "vm\U0001f600",
    "leading-space": " vm",
    "trailing-no-break-space": "vm\u00a0",
    "leading-ideographic-space": "\u3000vm",
}

ACCEPTED = ["vm", "web server 1", "vm-ü-é-日本語", "a\u00a0b", "x" * 255, "Ω≈ç√∫"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    harness = await start_cloud(tmp_path_factory.mktemp("server-names"), fake_hosts=1)
    harness.tenant_net = await harness.make_network(headers=TENANT)
    yield harness
    await stop_cloud(harness)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server_id(cloud):
    created = await cloud.boot(name="original", networks=[{"uuid": cloud.tenant_net["id"]}], headers=TENANT)
    await cloud.wait_status(created["server"]["id"], "ACTIVE", headers=TENANT)
    return created["server"]["id"]


async def tenant_server_names(cloud) -> list[str]:
    r = await cloud.compute.get("/v2.1/servers", headers=TENANT)
    assert r.status_code == 200, r.text
    return [s["name"] for s in r.json()["servers"]]


def assert_refused(r) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {"badRequest": {"code": 400, "message": NOVA_MESSAGE}}


@pytest.mark.parametrize("name", REFUSED.values(), ids=REFUSED.keys())
async def test_a_create_with_a_name_nova_refuses_is_400_and_creates_nothing(cloud, server_id, name):
    before = await tenant_server_names(cloud)
    r = await cloud.compute.post("/v2.1/servers", headers=TENANT, json={"server": {
        "name": name, "imageRef": await cloud.default_image(), "flavorRef": "1",
        "networks": [{"uuid": cloud.tenant_net["id"]}]}})
    assert_refused(r)
    assert await tenant_server_names(cloud) == before


@pytest.mark.parametrize("name", REFUSED.values(), ids=REFUSED.keys())
async def test_an_update_with_a_name_nova_refuses_is_400_and_changes_nothing(cloud, server_id, name):
    r = await cloud.compute.put(f"/v2.1/servers/{server_id}", json={"server": {"name": name}}, headers=TENANT)
    assert_refused(r)
    assert (await cloud.server(server_id, TENANT))["name"] == "original"


@pytest.mark.parametrize("name", REFUSED.values(), ids=REFUSED.keys())
async def test_a_rebuild_with_a_name_nova_refuses_is_400_and_changes_nothing(cloud, server_id, name):
    r = await cloud.compute.post(f"/v2.1/servers/{server_id}/action", headers=TENANT, json={
        "rebuild": {"imageRef": await cloud.default_image(), "name": name}})
    assert_refused(r)
    server = await cloud.server(server_id, TENANT)
    assert server["name"] == "original" and server["status"] == "ACTIVE"


@pytest.mark.parametrize("name", ACCEPTED)
async def test_printable_names_are_taken_on_update(cloud, server_id, name):
    r = await cloud.compute.put(f"/v2.1/servers/{server_id}", json={"server": {"name": name}}, headers=TENANT)
    assert r.status_code == 200, r.text
    assert (await cloud.server(server_id, TENANT))["name"] == name
    r = await cloud.compute.put(f"/v2.1/servers/{server_id}", json={"server": {"name": "original"}}, headers=TENANT)
    assert r.status_code == 200, r.text
