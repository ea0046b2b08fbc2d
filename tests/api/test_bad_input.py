"""Bad requests answer 400 with Nova's ``badRequest`` body naming what is wrong."""

from __future__ import annotations

import pytest

from tests.api.conftest import PROJECT, member, version

V211 = version("2.11")

CASES = [
    # (method, path, body, headers, words the message must contain)
    ("post", "/v2.1/flavors", {"flavor": "x"}, {}, ["flavor", "is not of type 'object'"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "vcpus": 1, "disk": 1}}, {}, ["'ram' is a required"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 0, "vcpus": 1, "disk": 1}}, {},
     ["field/attribute ram", "less than the minimum of 1"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": "0", "vcpus": 1, "disk": 1}}, {},
     ["field/attribute ram"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": "a", "disk": 1}}, {},
     ["field/attribute vcpus"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": -1}}, {},
     ["field/attribute disk"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": " f", "ram": 64, "vcpus": 1, "disk": 1}}, {},
     ["'name' value"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": 1, "id": " x"}}, {},
     ["field/attribute id"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": 1, "rxtx_factor": 0}}, {},
     ["field/attribute rxtx_factor"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": 1, "bogus": 1}}, {},
     ["flavor", "Additional properties are not allowed ('bogus' was unexpected)"]),
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": 1,
                                          "os-flavor-access:is_public": "maybe"}}, {},
     ["os-flavor-access:is_public"]),
    ("get", "/v2.1/flavors?minRam=abc", None, {}, ["minRam"]),
    ("get", "/v2.1/flavors?sort_key=bogus", None, {}, ["sort_key"]),
    ("get", "/v2.1/flavors?limit=-1", None, {}, ["limit"]),
    ("get", "/v2.1/flavors?marker=nope", None, {}, ["marker"]),
    ("post", "/v2.1/flavors/1/os-extra_specs", {"extra_specs": {"bad/key": "v"}}, {}, ["extra_specs"]),
    ("post", "/v2.1/flavors/1/os-extra_specs", {"extra_specs": {"k": "v" * 256}}, {}, ["field/attribute k"]),
    ("post", "/v2.1/flavors/1/action", {"addTenantAccess": {}}, {}, ["'tenant' is a required"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {}}, {}, ["'name' is a required"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {"name": "a/b"}}, {}, ["Keypair name contains unsafe characters"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {"name": "k", "public_key": "not a key"}}, {},
     ["Keypair data is invalid"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {"name": "k", "type": "ssh"}}, {}, ["type", "was unexpected"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {"name": "k", "type": "pgp"}}, version("2.2"),
     ["field/attribute type"]),
    ("post", "/v2.1/os-keypairs", {"keypair": {"name": 5}}, {}, ["field/attribute name"]),
    ("put", "/v2.1/os-services/enable", {"host": "h"}, {}, ["'binary' is a required"]),
    ("put", "/v2.1/os-services/disable", {"host": "bad host!", "binary": "nova-compute"}, {},
     ["field/attribute host"]),
    ("put", "/v2.1/os-services/disable-log-reason", {"host": "h", "binary": "nova-compute"}, {},
     ["disabled reason"]),
    ("put", "/v2.1/os-services/disable-log-reason", {"host": "h", "binary": "nova-compute",
                                                      "disabled_reason": ""}, {}, ["field/attribute disabled_reason"]),
    ("put", "/v2.1/os-services/force-down", {"host": "h", "binary": "nova-compute", "forced_down": "x"}, V211,
     ["field/attribute forced_down"]),
    ("put", "/v2.1/os-services/force-down", {"host": "h", "binary": "nova-compute"}, V211, ["forced_down"]),
    ("delete", "/v2.1/os-services/xyz", None, {}, ["id must be an integer"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota_set": {"instances": -2}}, {},
     ["field/attribute instances", "less than the minimum of -1"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota_set": {"cores": "many"}}, {}, ["field/attribute cores"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota_set": {"bogus": 1}}, {}, ["'bogus' was unexpected"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota_set": {"ram": 1, "force": "sure"}}, {},
     ["field/attribute force"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota": {}}, {}, ["'quota_set' is a required"]),
    ("put", f"/v2.1/os-quota-sets/{PROJECT}", {"quota_set": {"networks": 1}}, {}, ["networks quota is disabled"]),
    ("post", "/v2.1/os-server-groups", {"server_group": {"name": "g"}}, {}, ["'policies' is a required"]),
    ("post", "/v2.1/os-server-groups", {"server_group": {"name": "g", "policies": ["wrong"]}}, {},
     ["field/attribute", "wrong"]),
    ("post", "/v2.1/os-server-groups", {"server_group": {"name": "g", "policies": ["affinity", "anti-affinity"]}},
     {}, ["field/attribute policies"]),
    ("post", "/v2.1/os-server-groups", {"server_group": {"name": "", "policies": ["affinity"]}}, {},
     ["field/attribute name"]),
    ("post", "/v2.1/os-server-groups", {"server_group": {"name": "g", "policies": "affinity"}}, {},
     ["field/attribute policies", "is not of type 'array'"]),
    ("get", "/v2.1/os-server-groups?offset=-1", None, member(), ["offset"]),
    ("get", "/v2.1/os-simple-tenant-usage?start=tomorrow", None, {}, ["Invalid datetime string"]),
    ("get", f"/v2.1/os-simple-tenant-usage/{PROJECT}?end=2024-01-01", None, member(), ["Invalid datetime string"]),
    ("get", "/v2.1/os-simple-tenant-usage?start=2024-02-01T00:00:00&end=2024-01-01T00:00:00", None, {},
     ["The start time cannot occur after the end time"]),
    ("get", "/v2.1/os-simple-tenant-usage?limit=-1", None, version("2.40"), ["query parameters limit"]),
    ("get", "/v2.1/os-simple-tenant-usage?marker=nope", None, version("2.40"), ["Marker nope could not be found"]),
    ("get", f"/v2.1/os-simple-tenant-usage/{PROJECT}?bogus=1", None, version("2.75"), ["'bogus' was unexpected"]),
    ("get", "/v2.1/os-instance_usage_audit_log/yesterday", None, {}, ["Invalid timestamp for date yesterday"]),
    ("get", "/v2.1/os-migrations?limit=x", None, version("2.59"), ["query parameters limit"]),
    ("get", "/v2.1/os-migrations?marker=nope", None, version("2.59"), ["Marker nope could not be found"]),
    ("get", "/v2.1/os-migrations?changes-since=soon", None, version("2.59"), ["query parameters changes-since"]),
    ("get", "/v2.1/os-migrations?changes-before=2024-01-01T00:00:00", None, version("2.65"), ["changes-before"]),
    ("get", "/v2.1/os-migrations?user_id=u", None, version("2.79"), ["'user_id' was unexpected"]),
]


@pytest.mark.parametrize("method,path,body,headers,words", CASES,
                         ids=[f"{c[0]} {c[1]} {i}" for i, c in enumerate(CASES)])
async def test_bad_input(client, method, path, body, headers, words):
    kwargs = {"headers": headers}
    if body is not None:
        kwargs["json"] = body
    r = await client.request(method.upper(), path, **kwargs)
    assert r.status_code == 400, r.text
    message = r.json()["badRequest"]["message"]
    assert r.json()["badRequest"]["code"] == 400
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("path", ["/v2.1/flavors", "/v2.1/os-keypairs", "/v2.1/os-server-groups"])
async def test_malformed_json(client, path):
    r = await client.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "badRequest" in r.json()
    r = await client.post(path, content=b"")
    assert r.status_code == 400 and "badRequest" in r.json()
