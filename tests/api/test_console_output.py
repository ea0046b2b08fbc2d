"""os-getConsoleOutput through the API (the libvirt driver's real console is in tests/libvirt)."""

from __future__ import annotations

import pytest

from tests.clouds import ADMIN, start_cloud, stop_cloud


async def _action(cloud, sid, body):
    return await cloud.compute.post(f"/v2.1/servers/{sid}/action", json=body, headers=ADMIN)


@pytest.mark.parametrize("body", [
    {"os-getConsoleOutput": {"length": "abc"}},
    {"os-getConsoleOutput": {"length": -2}},
    {"os-getConsoleOutput": {"lines": 3}},
    {"os-getConsoleOutput": None},
])
async def test_bad_input(cloud, body):
    net = await cloud.make_network()
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    r = await _action(cloud, sid, body)
    assert r.status_code == 400, r.text
    assert "badRequest" in r.json()


async def test_console_output_and_its_length(cloud):
    net = await cloud.make_network()
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    full = cloud.driver("host-1").guests[sid]
    lines = (await cloud.driver("host-1").get_console_output({"uuid": sid})).split("\n")
    assert len(lines) > 3 and lines[-1] == f"{full.name} login: "
    whole = "\n".join(lines)
    for length, expected in [(None, whole), (-1, whole), (2, "\n".join(lines[-2:])), ("1", lines[-1]), (0, ""),
                             (100, whole)]:
        body = {"os-getConsoleOutput": {} if length is None else {"length": length}}
        r = await _action(cloud, sid, body)
        assert r.status_code == 200, r.text
        assert r.json() == {"output": expected}, length
    r = await _action(cloud, "00000000-0000-0000-0000-000000000000", {"os-getConsoleOutput": {}})
    assert r.status_code == 404, r.text


async def test_a_driver_without_console_log_is_501(cloud):
    net = await cloud.make_network()
    sid = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
    server = await cloud.wait_status(sid, "ACTIVE")
    driver = cloud.driver(server["OS-EXT-SRV-ATTR:host"])

    async def no_console(instance):
        raise NotImplementedError
    driver.get_console_output = no_console
    r = await _action(cloud, sid, {"os-getConsoleOutput": {"length": 5}})
    assert r.status_code == 501, r.text
    assert r.json()["notImplemented"]["code"] == 501


async def test_not_on_a_host_yet(tmp_path):
    cloud = await start_cloud(tmp_path, fake_hosts=0)
    try:
        net = await cloud.make_network()
        sid = (await cloud.boot(networks=[{"uuid": net["id"]}]))["server"]["id"]
        await cloud.wait_status(sid, "ERROR")  # no host at all
        r = await _action(cloud, sid, {"os-getConsoleOutput": {}})
        assert r.status_code == 409, r.text
        assert "conflictingRequest" in r.json()
    finally:
        await stop_cloud(cloud)
