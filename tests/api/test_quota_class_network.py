"""Nova's quota class holds Nova's own numbers for the network resources: setting them through the
Compute API changes what the Compute API shows, never what the networking service enforces (as a
Nova beside Neutron). Tempest's quota-class tests write the class back while other projects create
security group rules, and those creates succeed: the class value never reaches the networking
service."""

from __future__ import annotations

from tests.clouds import member

V21 = {"OpenStack-API-Version": "compute 2.1"}
PROJECT = "c" * 32


async def test_the_compute_quota_class_does_not_limit_security_group_rules(cloud):
    r = await cloud.compute.put("/v2.1/os-quota-class-sets/default", headers=V21,
                                json={"quota_class_set": {"security_group_rules": 1, "security_groups": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["quota_class_set"]["security_group_rules"] == 1
    shown = (await cloud.compute.get("/v2.1/os-quota-sets/x/defaults", headers=V21)).json()["quota_set"]
    assert shown["security_group_rules"] == 1 and shown["security_groups"] == 1

    headers = member(PROJECT)
    for name in ("one", "two"):  # past the class's 1, within the networking service's own quota
        group = await cloud.network.post("/v2.0/security-groups", headers=headers,
                                         json={"security_group": {"name": name}})
        assert group.status_code == 201, group.text
        for port in (22, 80):
            rule = await cloud.network.post("/v2.0/security-group-rules", headers=headers, json={
                "security_group_rule": {"security_group_id": group.json()["security_group"]["id"],
                                        "direction": "ingress", "protocol": "tcp",
                                        "port_range_min": port, "port_range_max": port}})
            assert rule.status_code == 201, rule.text

