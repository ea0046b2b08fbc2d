"""/v2.1/os-server-groups, and the membership functions the compute API uses."""

from __future__ import annotations

import uuid

import pytest

from nefos import exceptions
from nefos.objects import server_groups
from nefos.db.models import Instance
from tests.api.conftest import PROJECT, USER, member, version
from tests.schemas import assert_schema

OTHER = "o" * 32


async def _create(client, name="g", policy="anti-affinity", headers=None):
    return await client.post("/v2.1/os-server-groups", json={"server_group": {"name": name, "policies": [policy]}},
                             headers=headers if headers is not None else member())


async def test_create_show_list_delete(client):
    r = await _create(client)
    group = assert_schema("server_groups.create_show_server_group", r)["server_group"]
    assert (group["name"], group["policies"], group["members"], group["metadata"]) == (
        "g", ["anti-affinity"], [], {})
    r = await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=version("2.13", member()))
    shown = assert_schema("server_groups.create_show_server_group", r)["server_group"]
    assert (shown["project_id"], shown["user_id"]) == (PROJECT, USER)
    await _create(client, name="theirs", policy="affinity", headers=member(project=OTHER))
    r = await client.get("/v2.1/os-server-groups", headers=member())
    assert [g["name"] for g in assert_schema("server_groups.list_server_groups", r)["server_groups"]] == ["g"]
    r = await client.get("/v2.1/os-server-groups", params={"all_projects": "True"}, headers=version("2.13"))
    assert {g["name"] for g in assert_schema("server_groups.list_server_groups", r)["server_groups"]} == {
        "g", "theirs"}
    r = await client.get("/v2.1/os-server-groups", params={"all_projects": "True"}, headers=member())
    assert r.status_code == 403
    r = await client.get("/v2.1/os-server-groups", params={"all_projects": "1", "limit": 1, "offset": 1})
    assert [g["name"] for g in r.json()["server_groups"]] == ["theirs"]
    # Another project's group is not ours to see or delete.
    assert (await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=member(project=OTHER))).status_code \
        == 403
    assert (await client.delete(f"/v2.1/os-server-groups/{group['id']}", headers=member(project=OTHER))) \
        .status_code == 403
    r = await client.delete(f"/v2.1/os-server-groups/{group['id']}", headers=member())
    assert_schema("server_groups.delete_server_group", r)
    r = await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=member())
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"] == f"Instance group {group['id']} could not be found."


async def test_soft_policies_from_215(client):
    r = await _create(client, policy="soft-affinity")
    assert r.status_code == 400 and "soft-affinity" in r.json()["badRequest"]["message"]
    r = await _create(client, policy="soft-affinity", headers=version("2.15", member()))
    assert assert_schema("server_groups.create_show_server_group", r)["server_group"]["policies"] == [
        "soft-affinity"]


async def test_quota(client):
    await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"server_groups": 1}})
    r = await _create(client, name="one")
    assert r.status_code == 200
    r = await _create(client, name="two")
    assert r.status_code == 403
    assert r.json()["forbidden"]["message"] == "Quota exceeded, too many server groups."
    r = await client.get("/v2.1/limits", headers=member())
    assert r.json()["limits"]["absolute"]["totalServerGroupsUsed"] == 1
    await client.delete(f"/v2.1/os-server-groups/{(await client.get('/v2.1/os-server-groups', headers=member())).json()['server_groups'][0]['id']}",
                        headers=member())
    assert (await _create(client, name="two")).status_code == 200


async def test_members(client, rt):
    group = (await _create(client)).json()["server_group"]
    vms = [str(uuid.uuid4()) for _ in range(3)]
    async with rt.db.transaction() as s:
        for vm in vms:
            s.add(Instance(uuid=vm, project_id=PROJECT, vm_state="active"))
    async with rt.db.transaction() as s:
        await server_groups.add_member(s, group["id"], vms[0])
        await server_groups.add_member(s, group["id"], vms[0])  # idempotent
        await server_groups.add_member(s, group["id"], vms[1], limit=2)
    with pytest.raises(exceptions.ServerGroupMembersLimitExceeded):
        async with rt.db.transaction() as s:
            await server_groups.add_member(s, group["id"], vms[2], limit=2)
    got = await server_groups.get_group(rt.db, group["id"])
    assert (got["uuid"], got["policy"], got["project_id"], got["members"]) == (
        group["id"], "anti-affinity", PROJECT, vms[:2])
    r = await client.get(f"/v2.1/os-server-groups/{group['id']}", headers=member())
    assert r.json()["server_group"]["members"] == vms[:2]
    async with rt.db.transaction() as s:
        await server_groups.remove_member(s, group["id"], vms[0])
    assert (await server_groups.get_group(rt.db, group["id"]))["members"] == vms[1:2]
    with pytest.raises(exceptions.InstanceGroupNotFound):
        await server_groups.get_group(rt.db, str(uuid.uuid4()))
    async with rt.db.reader() as s:
        assert await server_groups.member_limit(s, rt.cfg, PROJECT) == rt.cfg.quota_server_group_members
