"""Rescue and unrescue through the real HTTP API on the in-process cloud (fake hosts): the state
machine, Nova's state checks, the instance actions and what the fake hypervisor boots."""

from __future__ import annotations

import asyncio

from tests.clouds import ADMIN, member

MEMBER = member()
OTHER = member(project="f" * 32, user="e" * 32)


async def _active(cloud, headers=MEMBER) -> dict:
    if not getattr(cloud, "_rescue_net", None):
        cloud._rescue_net = await cloud.make_network(shared=True)
    server = (await cloud.boot(headers=headers))["server"]
    return await cloud.wait_status(server["id"], "ACTIVE", headers=headers)


async def _guest(cloud, server_id: str):
    host = (await cloud.server(server_id, ADMIN))["OS-EXT-SRV-ATTR:host"]
    return cloud.driver(host).guests[server_id]


async def _action_names(cloud, server_id: str) -> list[str]:
    r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=MEMBER)
    assert r.status_code == 200, r.text
    return [a["action"] for a in r.json()["instanceActions"]]


async def _wait_actions_finished(cloud, server_id: str) -> list[dict]:
    for _ in range(500):
        r = await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions", headers=ADMIN)
        listed = r.json()["instanceActions"]
        details = [(await cloud.compute.get(f"/v2.1/servers/{server_id}/os-instance-actions/{a['request_id']}",
                                            headers=ADMIN)).json()["instanceAction"] for a in listed]
        if all(e.get("finish_time") for d in details for e in d.get("events", [])) and all(
                d["events"] for d in details if d["action"] in ("rescue", "unrescue")):
            return details
        await asyncio.sleep(0.02)
    raise AssertionError("actions never finished")


async def test_rescue_then_unrescue(cloud):
    server = await _active(cloud)
    sid = server["id"]
    r = await cloud.action(sid, {"rescue": {"adminPass": "s3cret"}}, expect=200, headers=MEMBER)
    assert r.json() == {"adminPass": "s3cret"}
    rescued = await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    assert rescued["OS-EXT-STS:vm_state"] == "rescued"
    assert rescued["OS-EXT-STS:power_state"] == 1
    guest = await _guest(cloud, sid)
    assert guest.rescue["image_id"] == server["image"]["id"]
    assert [d[0] for d in guest.rescue["disks"]] == ["disk.rescue", "disk"]  # the rescue disk boots first
    assert guest.admin_password == "s3cret"

    await cloud.action(sid, {"unrescue": None}, expect=202, headers=MEMBER)
    back = await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    assert back["OS-EXT-STS:vm_state"] == "active" and back["OS-EXT-STS:power_state"] == 1
    assert (await _guest(cloud, sid)).rescue is None
    details = await _wait_actions_finished(cloud, sid)
    by_action = {d["action"]: d for d in details}
    assert {"rescue", "unrescue"} <= set(by_action)
    assert [e["event"] for e in by_action["rescue"]["events"]] == ["compute_rescue_instance"]
    assert by_action["rescue"]["events"][0]["result"] == "Success"
    assert by_action["unrescue"]["events"][0]["result"] == "Success"


async def test_generated_password_and_rescue_image(cloud):
    server = await _active(cloud)
    sid = server["id"]
    r = await cloud.action(sid, {"rescue": None}, expect=200, headers=MEMBER)
    password = r.json()["adminPass"]
    assert isinstance(password, str) and len(password) >= 8
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    assert (await _guest(cloud, sid)).admin_password == password
    await cloud.action(sid, {"unrescue": None}, headers=MEMBER)
    await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    # A rescue image named by the caller (at 2.87, where Nova allows stable rescues).
    image = await cloud.default_image()
    r = await cloud.action(sid, {"rescue": {"rescue_image_ref": image}}, expect=200,
                           headers={**MEMBER, "OpenStack-API-Version": "compute 2.87"})
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    assert (await _guest(cloud, sid)).rescue["image_id"] == image


async def test_rescue_of_a_stopped_server_comes_back_active(cloud):
    sid = (await _active(cloud))["id"]
    await cloud.action(sid, {"os-stop": None}, headers=MEMBER)
    await cloud.wait_status(sid, "SHUTOFF", headers=MEMBER)
    await cloud.action(sid, {"rescue": {}}, expect=200, headers=MEMBER)
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    await cloud.action(sid, {"unrescue": None}, headers=MEMBER)
    server = await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)  # Nova: unrescue always ends ACTIVE
    assert server["OS-EXT-STS:power_state"] == 1


async def test_state_checks(cloud):
    sid = (await _active(cloud))["id"]
    r = await cloud.action(sid, {"unrescue": None}, expect=409, headers=MEMBER)  # not rescued
    assert "conflictingRequest" in r.json()
    await cloud.action(sid, {"pause": None}, headers=MEMBER)
    await cloud.wait_status(sid, "PAUSED", headers=MEMBER)
    await cloud.action(sid, {"rescue": None}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"unpause": None}, headers=MEMBER)
    await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    await cloud.action(sid, {"rescue": None}, expect=200, headers=MEMBER)
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    image = await cloud.default_image()
    for body in ({"reboot": {"type": "HARD"}}, {"reboot": {"type": "SOFT"}}, {"rescue": None},
                 {"rebuild": {"imageRef": image}}, {"resize": {"flavorRef": "2"}}, {"os-stop": None},
                 {"pause": None}, {"suspend": None}, {"shelve": None}, {"createImage": {"name": "x"}}):
        r = await cloud.action(sid, body, expect=409, headers=MEMBER)
        assert "conflictingRequest" in r.json(), body
    # Security groups still change on a rescued server (Tempest's rescue tests do it).
    await cloud.action(sid, {"removeSecurityGroup": {"name": "default"}}, headers=MEMBER)
    await cloud.action(sid, {"addSecurityGroup": {"name": "default"}}, headers=MEMBER)
    # A locked server is refused to its non-admin owner.
    await cloud.action(sid, {"lock": None}, headers=ADMIN)
    await cloud.action(sid, {"unrescue": None}, expect=409, headers=MEMBER)
    await cloud.action(sid, {"unlock": None}, headers=ADMIN)
    await cloud.action(sid, {"unrescue": None}, headers=MEMBER)
    await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    assert (await _action_names(cloud, sid)).count("rescue") == 1


async def test_power_sync_leaves_a_rescued_server_alone(cloud):
    sid = (await _active(cloud))["id"]
    await cloud.action(sid, {"rescue": None}, expect=200, headers=MEMBER)
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    host = (await cloud.server(sid, ADMIN))["OS-EXT-SRV-ATTR:host"]
    # The rescue guest powered off from inside: Nova's sync leaves a RESCUED server's states alone
    # (neither the lifecycle event nor the periodic task makes it SHUTOFF).
    cloud.driver(host).simulate_power_off(sid)
    await cloud.compute_manager(host).periodic_sync_power_states()
    server = await cloud.server(sid, MEMBER)
    assert server["status"] == "RESCUE" and server["OS-EXT-STS:vm_state"] == "rescued"
    # Unrescue still brings the server back to ACTIVE, running.
    await cloud.action(sid, {"unrescue": None}, headers=MEMBER)
    server = await cloud.wait_status(sid, "ACTIVE", headers=MEMBER)
    assert server["OS-EXT-STS:power_state"] == 1


async def test_other_projects_and_bad_images(cloud):
    sid = (await _active(cloud))["id"]
    await cloud.action(sid, {"rescue": None}, expect=404, headers=OTHER)
    await cloud.action(sid, {"unrescue": None}, expect=404, headers=OTHER)
    r = await cloud.action(sid, {"rescue": {"rescue_image_ref": "7d1a1f8c-52a2-4ac0-b2a5-6a4d8b0b5e0f"}},
                           expect=400, headers=MEMBER)
    assert "badRequest" in r.json()
    assert (await cloud.server(sid, MEMBER))["OS-EXT-STS:task_state"] is None
    await cloud.action("7d1a1f8c-52a2-4ac0-b2a5-6a4d8b0b5e0f", {"rescue": None}, expect=404, headers=MEMBER)


async def test_rescued_server_can_be_deleted(cloud):
    sid = (await _active(cloud))["id"]
    await cloud.action(sid, {"rescue": None}, expect=200, headers=MEMBER)
    await cloud.wait_status(sid, "RESCUE", headers=MEMBER)
    host = (await cloud.server(sid, ADMIN))["OS-EXT-SRV-ATTR:host"]
    r = await cloud.compute.delete(f"/v2.1/servers/{sid}", headers=MEMBER)
    assert r.status_code == 204
    await cloud.wait_gone(sid, headers=MEMBER)
    assert sid not in cloud.driver(host).guests


async def test_a_failed_rescue_puts_the_server_in_error(cloud):
    sid = (await _active(cloud))["id"]
    host = (await cloud.server(sid, ADMIN))["OS-EXT-SRV-ATTR:host"]
    driver = cloud.driver(host)

    async def broken(*args, **kwargs):
        raise RuntimeError("rescue disk unreadable")

    driver.rescue = broken
    await cloud.action(sid, {"rescue": None}, expect=200, headers=MEMBER)
    server = await cloud.wait_status(sid, "ERROR", headers=ADMIN)
    assert "rescue disk unreadable" in server["fault"]["message"]
