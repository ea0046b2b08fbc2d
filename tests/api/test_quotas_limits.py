"""/v2.1/os-quota-sets, /v2.1/os-quota-class-sets and /v2.1/limits."""

from __future__ import annotations

from nefos.objects import quotas
from tests.api.conftest import PROJECT, member, version
from tests.schemas import assert_schema

OTHER = "o" * 32


async def test_show_defaults_detail(client, rt):
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}", headers=member())
    qs = assert_schema("quotas.get_quota_set", r)["quota_set"]
    assert qs["id"] == PROJECT
    assert (qs["instances"], qs["cores"], qs["ram"], qs["key_pairs"], qs["server_groups"]) == (
        rt.cfg.quota_instances, rt.cfg.quota_cores, rt.cfg.quota_ram, rt.cfg.quota_key_pairs,
        rt.cfg.quota_server_groups)
    assert (qs["floating_ips"], qs["fixed_ips"], qs["injected_files"]) == (10, -1, 5)
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}", headers=version("2.36", member()))
    qs = assert_schema("quotas.get_quota_set", r)["quota_set"]
    assert "floating_ips" not in qs and "security_groups" not in qs and "injected_files" in qs
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}/defaults", headers=member(project=OTHER))
    assert assert_schema("quotas.get_quota_set", r)["quota_set"]["instances"] == rt.cfg.quota_instances
    async with rt.db.transaction() as s:
        await quotas.consume(s, rt.cfg, PROJECT, {"instances": 2, "cores": 3, "ram": 1024})
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}/detail", headers=member())
    detail = assert_schema("quotas.get_quota_set_details", r)["quota_set"]
    assert detail["instances"] == {"limit": rt.cfg.quota_instances, "in_use": 2, "reserved": 0}
    assert detail["ram"]["in_use"] == 1024
    # Someone else's quotas are an admin's business.
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}", headers=member(project=OTHER))
    assert r.status_code == 403
    assert (await client.get(f"/v2.1/os-quota-sets/{PROJECT}/detail", headers=member(project=OTHER))).status_code \
        == 403


async def test_update_force_and_delete(client, rt):
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"instances": 5, "cores": "7"}})
    qs = assert_schema("quotas.update_quota_set", r)["quota_set"]
    assert (qs["instances"], qs["cores"]) == (5, 7) and "id" not in qs
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}")
    assert r.json()["quota_set"]["instances"] == 5
    async with rt.db.transaction() as s:
        await quotas.consume(s, rt.cfg, PROJECT, {"instances": 3})
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"instances": 2}})
    assert r.status_code == 400
    assert r.json()["badRequest"]["message"] == (
        "Quota limit 2 for instances must be greater than or equal to already used and reserved 3.")
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"instances": 2, "force": True}})
    assert r.status_code == 200 and r.json()["quota_set"]["instances"] == 2
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"instances": -1}})
    assert r.json()["quota_set"]["instances"] == -1
    # The new limit is what quotas enforce.
    await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"cores": 1}})
    async with rt.db.reader() as s:
        assert (await quotas.limits(s, rt.cfg, PROJECT))["cores"] == 1
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"cores": 9}}, headers=member())
    assert r.status_code == 403
    assert (await client.delete(f"/v2.1/os-quota-sets/{PROJECT}", headers=member())).status_code == 403
    r = await client.delete(f"/v2.1/os-quota-sets/{PROJECT}")
    assert_schema("quotas.delete_quota", r)
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}")
    assert (r.json()["quota_set"]["instances"], r.json()["quota_set"]["cores"]) == (
        rt.cfg.quota_instances, rt.cfg.quota_cores)
    # 2.36: network resources may no longer be set.
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"floating_ips": 1}},
                         headers=version("2.36"))
    assert r.status_code == 400 and "floating_ips" in r.json()["badRequest"]["message"]
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"floating_ips": 1}})
    assert r.status_code == 200 and r.json()["quota_set"]["floating_ips"] == 1


async def test_quota_class_set(client, rt):
    r = await client.get("/v2.1/os-quota-class-sets/default")
    qc = assert_schema("quota_classes.get_quota_class_set", r)["quota_class_set"]
    assert qc["id"] == "default" and qc["instances"] == rt.cfg.quota_instances
    assert "server_groups" not in qc
    assert (await client.get("/v2.1/os-quota-class-sets/default", headers=member())).status_code == 403


async def test_updating_the_default_quota_class_changes_every_projects_defaults(client, rt):
    r = await client.put("/v2.1/os-quota-class-sets/default",
                         json={"quota_class_set": {"instances": 2, "cores": "40", "floating_ips": 7}})
    qc = assert_schema("quota_classes.update_quota_class_set", r)["quota_class_set"]
    assert (qc["instances"], qc["cores"], qc["floating_ips"]) == (2, 40, 7) and "id" not in qc
    shown = (await client.get("/v2.1/os-quota-class-sets/default")).json()["quota_class_set"]
    assert (shown["instances"], shown["cores"], shown["ram"]) == (2, 40, rt.cfg.quota_ram)
    r = await client.get(f"/v2.1/os-quota-sets/{OTHER}/defaults", headers=member(project=OTHER))
    assert r.json()["quota_set"]["instances"] == 2
    # Enforced: a project without limits of its own gets the class's, one with its own keeps them.
    async with rt.db.transaction() as s:
        await quotas.consume(s, rt.cfg, OTHER, {"instances": 2})
    try:
        async with rt.db.transaction() as s:
            await quotas.consume(s, rt.cfg, OTHER, {"instances": 1})
        raise AssertionError("the class's instances limit of 2 was not enforced")
    except quotas.exceptions.OverQuota:
        pass
    await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"instances": 5}})
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}", headers=member())
    assert r.json()["quota_set"]["instances"] == 5


async def test_bad_quota_class_updates(client):
    for body in ({"quota_class_set": {"instances": -2}}, {"quota_class_set": {"instances": "many"}},
                 {"quota_class_set": {"no_such_resource": 1}}, {"quota_class": {}}, []):
        r = await client.put("/v2.1/os-quota-class-sets/default", json=body)
        assert r.status_code == 400 and "badRequest" in r.json(), (body, r.text)
    r = await client.put("/v2.1/os-quota-class-sets/default", json={"quota_class_set": {"instances": 1}},
                         headers=member())
    assert r.status_code == 403


async def test_limits(client, rt):
    async with rt.db.transaction() as s:
        await quotas.consume(s, rt.cfg, PROJECT, {"instances": 1, "cores": 2, "ram": 512, "server_groups": 1})
    r = await client.get("/v2.1/limits", headers=member())
    limits = assert_schema("limits.get_limit", r)["limits"]
    absolute = limits["absolute"]
    assert limits["rate"] == []
    assert (absolute["maxTotalInstances"], absolute["totalInstancesUsed"], absolute["totalCoresUsed"],
            absolute["totalRAMUsed"], absolute["totalServerGroupsUsed"]) == (rt.cfg.quota_instances, 1, 2, 512, 1)
    assert absolute["maxTotalKeypairs"] == rt.cfg.quota_key_pairs
    assert absolute["maxServerMeta"] == absolute["maxImageMeta"] == rt.cfg.quota_metadata_items
    assert absolute["maxSecurityGroups"] == rt.cfg.quota_security_groups
    for v, gone in (("2.36", "maxSecurityGroups"), ("2.39", "maxImageMeta")):
        r = await client.get("/v2.1/limits", headers=version(v, member()))
        absolute = assert_schema("limits.get_limit", r)["limits"]["absolute"]
        assert gone not in absolute and "maxTotalCores" in absolute
    r = await client.get("/v2.1/limits", headers=version("2.47", member()))
    assert "maxPersonality" in assert_schema("limits.get_limit", r)["limits"]["absolute"]
    # Admins may look at another project's limits; members may not.
    await client.put(f"/v2.1/os-quota-sets/{OTHER}", json={"quota_set": {"instances": 3}})
    r = await client.get("/v2.1/limits", params={"tenant_id": OTHER})
    assert r.json()["limits"]["absolute"]["maxTotalInstances"] == 3
    r = await client.get("/v2.1/limits", params={"tenant_id": OTHER}, headers=member())
    assert r.status_code == 403


NOVA_DEFAULTS = {"instances": 10, "cores": 20, "ram": 51200, "metadata_items": 128, "key_pairs": 100,
                 "server_groups": 10, "server_group_members": 10}
NOVA_NETWORK_DEFAULTS = {"floating_ips": 10, "fixed_ips": -1, "security_groups": 10, "security_group_rules": 20}
NOVA_INJECTED_DEFAULTS = {"injected_files": 5, "injected_file_content_bytes": 10240, "injected_file_path_bytes": 255}


async def test_every_default_is_novas_at_each_version(client):
    """Nova's defaults, each shown where Nova shows it (network ones below 2.36, injected files below
    2.57), in the defaults, a project's quota set and its limits (security group rules: Nova's 20,
    whatever the networking service enforces)."""
    for v, expected in (("2.1", {**NOVA_DEFAULTS, **NOVA_NETWORK_DEFAULTS, **NOVA_INJECTED_DEFAULTS}),
                        ("2.36", {**NOVA_DEFAULTS, **NOVA_INJECTED_DEFAULTS}), ("2.57", NOVA_DEFAULTS)):
        for path in (f"/v2.1/os-quota-sets/{PROJECT}/defaults", f"/v2.1/os-quota-sets/{PROJECT}"):
            qs = (await client.get(path, headers=version(v, member()))).json()["quota_set"]
            assert {k: qs[k] for k in qs if k != "id"} == expected, (v, path)
    absolute = (await client.get("/v2.1/limits", headers=member())).json()["limits"]["absolute"]
    assert (absolute["maxSecurityGroupRules"], absolute["maxSecurityGroups"], absolute["maxTotalFloatingIps"],
            absolute["maxPersonality"], absolute["maxPersonalitySize"]) == (20, 10, 10, 5, 10240)
    # A value set for the project (or the default class) is shown instead.
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"security_group_rules": 33}})
    assert r.status_code == 200 and r.json()["quota_set"]["security_group_rules"] == 33, r.text
    r = await client.put("/v2.1/os-quota-class-sets/default", json={"quota_class_set": {"security_group_rules": 44}})
    assert r.status_code == 200, r.text
    assert (await client.get(f"/v2.1/os-quota-sets/{OTHER}/defaults")).json()["quota_set"][
        "security_group_rules"] == 44
