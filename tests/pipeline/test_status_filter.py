"""The server list's ``status`` filter as Nova's: a status names (vm_state, task_state) pairs, so
REBOOT is an ACTIVE server in a reboot task, not every ACTIVE one (Nova's
``task_and_vm_state_from_status``); a vm_state's own status (ACTIVE) filters on the vm_state alone."""

from __future__ import annotations

from sqlalchemy import update

from nefos.db.models import Instance
from tests.noauth import ADMIN

V237 = {**ADMIN, "OpenStack-API-Version": "compute 2.37"}


async def _names(cloud, status: str) -> list[str]:
    r = await cloud.compute.get("/v2.1/servers", params={"status": status})
    assert r.status_code == 200, r.text
    return sorted(s["name"] for s in r.json()["servers"])


async def test_reboot_and_hard_reboot_are_task_states_of_active_servers(cloud):
    ids = {}
    for name in ("calm", "rebooting", "hard"):
        ids[name] = (await cloud.boot(name=name, networks="none", headers=V237))["server"]["id"]
    for sid in ids.values():
        await cloud.wait_status(sid, "ACTIVE")
    async with cloud.rt.db.transaction() as s:
        await s.execute(update(Instance).where(Instance.uuid == ids["rebooting"]).values(task_state="reboot_started"))
        await s.execute(update(Instance).where(Instance.uuid == ids["hard"]).values(task_state="rebooting_hard"))
    assert await _names(cloud, "REBOOT") == ["rebooting"]
    assert await _names(cloud, "HARD_REBOOT") == ["hard"]
    assert await _names(cloud, "reboot") == ["rebooting"]
    assert await _names(cloud, "ACTIVE") == ["calm", "hard", "rebooting"]  # Nova: the vm_state alone
    assert await _names(cloud, "SHUTOFF") == []
    r = await cloud.compute.get("/v2.1/servers", params=[("status", "REBOOT"), ("status", "HARD_REBOOT")])
    assert sorted(s["name"] for s in r.json()["servers"]) == ["hard", "rebooting"]
