"""Bad requests answer 400 with Nova's ``badRequest`` body naming what is wrong."""

from __future__ import annotations

import pytest

from tests.api.conftest import PROJECT, member, version

V211 = version("2.11")
V2102, V2104 = version("2.102"), version("2.104")
V26 = version("2.6")
SERVER = "/v2.1/servers/00000000-0000-0000-0000-000000000001"
IMAGE = "3e5c7f5e-1a52-4f36-9e3c-7a53a1d7b0a1"  # no such image: the body is refused first
SG = "00000000-0000-0000-0000-000000000000"

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
    ("put", "/v2.1/os-hosts/h", {}, {}, ["is not valid under any of the given schemas"]),
    ("put", "/v2.1/os-hosts/h", {"status": "on"}, {}, ["status"]),
    ("put", "/v2.1/os-hosts/h", {"maintenance_mode": "yes"}, {}, ["maintenance_mode"]),
    ("put", "/v2.1/os-hosts/h", {"status": "enable", "bogus": 1}, {}, ["bogus"]),
    ("post", "/v2.1/servers/s/os-volume_attachments", {"volumeAttachment": {}}, {}, ["'volumeId' is a required"]),
    ("post", "/v2.1/servers/s/os-volume_attachments", {"volumeAttachment": {"volumeId": "x"}}, {}, ["volumeId"]),
    ("post", "/v2.1/servers/s/os-volume_attachments",
     {"volumeAttachment": {"volumeId": "00000000-0000-4000-8000-000000000001", "device": "sda"}}, {}, ["device"]),
    ("put", "/v2.1/servers/s/os-volume_attachments/v", {"volumeAttachment": {}}, {}, ["'volumeId' is a required"]),
    ("post", "/v2.1/os-volumes", {"volume": {}}, {}, ["'size' is a required"]),
    ("post", "/v2.1/os-volumes", {"volume": {"size": 0}}, {}, ["size"]),
    ("post", "/v2.1/os-snapshots", {"snapshot": {}}, {}, ["'volume_id' is a required"]),
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
    # 2.102: no rxtx_factor, a name filter, no unknown query parameters where none is read
    ("post", "/v2.1/flavors", {"flavor": {"name": "f", "ram": 64, "vcpus": 1, "disk": 1, "rxtx_factor": 1}}, V2102,
     ["'rxtx_factor' was unexpected"]),
    ("get", "/v2.1/flavors?sort_key=rxtx_factor", None, V2102, ["sort_key"]),
    ("get", "/v2.1/flavors/detail?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/flavors?name=(", None, V2102, ["Invalid regular expression for name"]),
    ("get", "/v2.1/flavors/1?bogus=1", None, V2102, ["Additional properties are not allowed ('bogus'"]),
    ("get", "/v2.1/flavors/1/os-extra_specs?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/flavors/1/os-flavor-access?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/os-availability-zone?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/os-aggregates?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/os-aggregates/1?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/os-quota-class-sets/default?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/servers/x?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    ("get", "/v2.1/servers/x/metadata?bogus=1", None, V2102, ["Additional properties are not allowed"]),
    # 2.104: the pinned availability zone on update, a name or null
    ("put", "/v2.1/servers/x", {"server": {"pinned_availability_zone": None}}, version("2.103"),
     ["'pinned_availability_zone' was unexpected"]),
    ("put", "/v2.1/servers/x", {"server": {"pinned_availability_zone": 5}}, V2104,
     ["field/attribute pinned_availability_zone"]),
    ("put", "/v2.1/servers/x", {"server": {"pinned_availability_zone": ""}}, V2104,
     ["field/attribute pinned_availability_zone"]),
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
    # spice-direct: 2.99's, and only through remote-consoles
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "spice", "type": "spice-direct"}},
     version("2.98"), ["field/attribute type"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "spice", "type": "spice-direct",
                                                             "tls": True}}, version("2.99"), ["'tls' was unexpected"]),
    ("post", f"{SERVER}/remote-consoles", {"remote_console": {"protocol": "spice", "type": 5}}, version("2.99"),
     ["field/attribute type"]),
    ("post", f"{SERVER}/action", {"os-getSPICEConsole": {"type": "spice-direct"}}, {}, ["field/attribute type"]),
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
    # The network proxy APIs (up to 2.35): bodies and ids refused before the Networking API is asked.
    ("post", "/v2.1/os-security-groups", {"security_group": {"name": "g"}}, {}, ["'description' is a required"]),
    ("post", "/v2.1/os-security-groups", {"security_group": {"name": "g" * 256, "description": ""}}, {},
     ["field/attribute name"]),
    ("post", "/v2.1/os-security-groups", {"group": {}}, {}, ["'security_group' is a required"]),
    ("put", f"/v2.1/os-security-groups/{SG}", {"security_group": {"description": 5, "name": "g"}}, {},
     ["field/attribute description"]),
    ("get", "/v2.1/os-security-groups?limit=-1", None, {}, ["limit"]),
    ("get", "/v2.1/os-security-groups/nope", None, {}, ["Security group id should be uuid"]),
    ("delete", "/v2.1/os-security-groups/nope", None, {}, ["Security group id should be uuid"]),
    ("post", "/v2.1/os-security-group-rules", {"security_group_rule": {}}, {}, ["'parent_group_id' is a required"]),
    ("post", "/v2.1/os-security-group-rules", {"security_group_rule": {"parent_group_id": "nope"}}, {},
     ["field/attribute parent_group_id"]),
    ("post", "/v2.1/os-security-group-rules", {"security_group_rule": {"parent_group_id": SG, "group_id": 5}}, {},
     ["field/attribute group_id"]),
    ("delete", "/v2.1/os-security-group-rules/nope", None, {}, ["Security group id should be uuid"]),
    ("post", "/v2.1/os-floating-ips", {"pool": 5}, {}, ["field/attribute pool"]),
    ("post", "/v2.1/os-floating-ips", [], {}, ["is not of type"]),
    ("post", "/v2.1/os-networks/1/action", {"explode": None}, {}, ["There is no such action: explode"]),
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
    # os-migrateLive's body by microversion (checked before the server is looked up, as Nova)
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": False}}, {},
     ["'disk_over_commit' is a required"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": "auto",
                                                     "disk_over_commit": False}}, {}, ["block_migration"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": "a b", "block_migration": False,
                                                     "disk_over_commit": False}}, {}, ["host"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": False,
                                                     "disk_over_commit": False}}, version("2.25"),
     ["'disk_over_commit' was unexpected"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": "x"}}, version("2.25"),
     ["block_migration"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"block_migration": False}}, version("2.25"),
     ["'host' is a required"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": False, "force": True}},
     version("2.25"), ["'force' was unexpected"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": False, "force": "x"}},
     version("2.30"), ["force"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": None, "block_migration": False, "force": True}},
     version("2.30"), ["Can't force to a non-provided destination"]),
    ("post", f"{SERVER}/action", {"os-migrateLive": {"host": "h", "block_migration": False, "force": True}},
     version("2.68"), ["'force' was unexpected"]),
    ("post", f"{SERVER}/migrations/1/action", {"force_complete": {}}, version("2.22"), ["force_complete"]),
    ("post", f"{SERVER}/migrations/1/action", {"bogus": None}, version("2.22"), ["'force_complete' is a required"]),
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


@pytest.mark.parametrize("path", ["/v2.1/flavors", "/v2.1/os-keypairs", "/v2.1/os-server-groups",
                                  "/v2.1/os-aggregates", "/v2.1/os-aggregates/1/action"])
async def test_malformed_json(client, path):
    r = await client.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "badRequest" in r.json()
    r = await client.post(path, content=b"")
    assert r.status_code == 400 and "badRequest" in r.json()


# Host aggregates: each body is refused before the policy and the aggregate lookup, as in Nova.
AGGREGATE_CASES = [
    ("post", "/v2.1/os-aggregates", {"aggregate": {}}, {}, ["'name' is a required"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": ""}}, {}, ["field/attribute name"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": "x" * 256}}, {}, ["field/attribute name"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": " agg"}}, {}, ["'name' value"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": "agg", "availability_zone": "a:b"}}, {},
     ["field/attribute availability_zone"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": "agg", "availability_zone": 5}}, {},
     ["field/attribute availability_zone"]),
    ("post", "/v2.1/os-aggregates", {"aggregate": {"name": "agg", "bogus": 1}}, {}, ["'bogus' was unexpected"]),
    ("put", "/v2.1/os-aggregates/1", {"aggregate": {}}, {}, ["aggregate"]),
    ("put", "/v2.1/os-aggregates/1", {"aggregate": {"name": "   "}}, {}, ["'name' value"]),
    ("put", "/v2.1/os-aggregates/abc", {"aggregate": {"name": "n"}}, {}, ["id must be an integer"]),
    ("get", "/v2.1/os-aggregates/abc", None, {}, ["id must be an integer"]),
    ("delete", "/v2.1/os-aggregates/abc", None, {}, ["id must be an integer"]),
    ("post", "/v2.1/os-aggregates/1/action", {"add_host": {}}, {}, ["'host' is a required"]),
    ("post", "/v2.1/os-aggregates/1/action", {"add_host": {"host": "bad host!"}}, {}, ["field/attribute host"]),
    ("post", "/v2.1/os-aggregates/1/action", {"remove_host": {"host": "h", "x": 1}}, {}, ["'x' was unexpected"]),
    ("post", "/v2.1/os-aggregates/1/action", {"set_metadata": {"metadata": {"bad/key": "v"}}}, {}, ["metadata"]),
    ("post", "/v2.1/os-aggregates/1/action", {"set_metadata": {"metadata": {"k": "v" * 256}}}, {},
     ["field/attribute k"]),
    ("post", "/v2.1/os-aggregates/1/action", {"set_metadata": {}}, {}, ["'metadata' is a required"]),
    ("post", "/v2.1/os-aggregates/1/action", {"frobnicate": {}}, {}, ["There is no such action: frobnicate"]),
    ("post", "/v2.1/os-aggregates/abc/action", {"add_host": {"host": "h"}}, {}, ["id must be an integer"]),
    ("post", "/v2.1/os-aggregates/1/images", {"cache": []}, version("2.81"), ["field/attribute cache"]),
    ("post", "/v2.1/os-aggregates/1/images", {"cache": [{"id": "nope"}]}, version("2.81"), ["field/attribute id"]),
    ("post", "/v2.1/os-aggregates/abc/images", {"cache": [{"id": "6f1c2d0e-9f7a-4a55-b1c3-1c2d3e4f5a6b"}]},
     version("2.81"), ["id must be an integer"]),
]


@pytest.mark.parametrize("method,path,body,headers,words", AGGREGATE_CASES,
                         ids=[f"{c[0]} {c[1]} {i}" for i, c in enumerate(AGGREGATE_CASES)])
async def test_aggregate_bad_input(client, method, path, body, headers, words):
    await test_bad_input(client, method, path, body, headers, words)
