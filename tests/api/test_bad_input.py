"""Bad requests answer 400 with Nova's ``badRequest`` body naming what is wrong."""

from __future__ import annotations

import pytest

from tests.api.conftest import PROJECT, member, version

V211 = version("2.11")
V26 = version("2.6")
SERVER = "/v2.1/servers/00000000-0000-0000-0000-000000000001"
IMAGE = "3e5c7f5e-1a52-4f36-9e3c-7a53a1d7b0a1"  # no such image: the body is refused first

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
    ("post", f"{SERVER}/action", {"os-getVNCConsole": {}}, {}, ["'type' is a required"]),
    ("post", f"{SERVER}/action", {"os-getVNCConsole": {"type": "spice-html5"}}, {}, ["field/attribute type"]),
    ("post", f"{SERVER}/action", {"os-getVNCConsole": {"type": "novnc", "x": 1}}, {}, ["'x' was unexpected"]),
    ("post", f"{SERVER}/action", {"os-getVNCConsole": None}, {}, ["os-getVNCConsole"]),
    ("post", f"{SERVER}/action", {"os-getSPICEConsole": {"type": "novnc"}}, {}, ["field/attribute type"]),
    ("post", f"{SERVER}/action", {"os-getSerialConsole": {}}, {}, ["'type' is a required"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "vnc"}}, V26, ["'type' is a required"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"type": "novnc"}}, V26, ["'protocol' is a required"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "mks", "type": "webmks"}}, V26,
     ["field/attribute protocol"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "vnc", "type": "spice-direct"}},
     version("2.98"), ["field/attribute type"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "vnc", "type": "novnc", "x": 1}}, V26,
     ["'x' was unexpected"]),
    ("post", f"{SERVER}/remote-consoles", {"console": {}}, V26, ["'remote_console' is a required"]),
    ("get", "/v2.1/os-console-auth-tokens/abc?bogus=1", None, version("2.99"), ["bogus"]),
    # The image proxy: bodies are checked before the image is looked up, as in Nova.
    ("get", "/v2.1/images?limit=0", None, member(), ["limit"]),
    ("get", "/v2.1/images/detail?limit=x", None, member(), ["limit"]),
    ("get", "/v2.1/images?marker=nope", None, member(), ["marker"]),
    ("get", "/v2.1/images/detail?status=bogus", None, member(), ["status"]),
    ("get", "/v2.1/images?changes-since=yesterday", None, member(), ["yesterday"]),
    ("get", "/v2.1/images?minDisk=big", None, member(), ["min_disk"]),
    ("post", f"/v2.1/images/{IMAGE}/metadata", {"metadata": {"": "v"}}, member(), ["metadata"]),
    ("put", f"/v2.1/images/{IMAGE}/metadata", {"metadata": {"k": "v" * 256}}, member(), ["field/attribute k"]),
    ("put", f"/v2.1/images/{IMAGE}/metadata", {"meta": {}}, member(), ["'metadata' is a required"]),
    ("put", f"/v2.1/images/{IMAGE}/metadata/k", {"meta": {"k": "v", "j": "w"}}, member(), ["meta"]),
    ("put", f"/v2.1/images/{IMAGE}/metadata/k", {"meta": {"j": "w"}}, member(), ["Request body and URI mismatch"]),
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
