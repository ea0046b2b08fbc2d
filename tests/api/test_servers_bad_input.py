"""Bad requests to servers and server actions that the Compute API refuses on their face.

Each is refused by request validation before anything is looked up (the app
runs here without a compute API layer behind it, so a request that got past
validation would answer 500): 400 with Nova's ``badRequest`` body, the message
naming the offending field. The cases that need a running cloud (unknown
flavor/image/network, 404, 409, quota, ...) are in
``tests/servers/test_servers_bad_input.py``.
"""

from __future__ import annotations

import pytest

from tests.api.conftest import version

IMAGE = "70a599e0-31e7-49b7-b260-868f441e862b"
NET = "3cb9bc59-5699-4588-a4b1-b87f96708bc6"
SERVER = "9c5b2c89-8b2a-4a1e-9a44-1f4b0c8b3a11"


def server(**fields) -> dict:
    body = {"name": "vm", "imageRef": IMAGE, "flavorRef": "1", **fields}
    return {"server": {k: v for k, v in body.items() if v is not ...}}


V219, V236, V237 = version("2.19"), version("2.36"), version("2.37")
ACTION = f"/v2.1/servers/{SERVER}/action"

CASES = [
    # (id, method, path, body, headers, words the message must contain)
    ("body-not-object", "post", "/v2.1/servers", [], {}, ["is not of type 'object'"]),
    ("no-server-key", "post", "/v2.1/servers", {"srv": {}}, {}, ["'server' is a required property"]),
    ("server-not-object", "post", "/v2.1/servers", {"server": "vm"}, {}, ["field/attribute server"]),
    ("missing-name", "post", "/v2.1/servers", server(name=...), {}, ["'name' is a required property"]),
    ("missing-flavorRef", "post", "/v2.1/servers", server(flavorRef=...), {},
     ["'flavorRef' is a required property"]),
    ("empty-name", "post", "/v2.1/servers", server(name=""), {}, ["field/attribute name"]),
    ("long-name", "post", "/v2.1/servers", server(name="n" * 256), {}, ["field/attribute name", "too long"]),
    ("name-leading-space", "post", "/v2.1/servers", server(name=" vm"), {}, ["invalid 'name' value", "whitespace"]),
    ("name-not-string", "post", "/v2.1/servers", server(name=7), {}, ["field/attribute name"]),
    ("imageRef-not-string", "post", "/v2.1/servers", server(imageRef=7), {}, ["field/attribute imageRef"]),
    ("imageRef-not-uuid", "post", "/v2.1/servers", server(imageRef="not-an-image"), {},
     ["Invalid imageRef provided"]),
    ("flavorRef-empty", "post", "/v2.1/servers", server(flavorRef=""), {}, ["field/attribute flavorRef"]),
    ("flavorRef-list", "post", "/v2.1/servers", server(flavorRef=["1"]), {}, ["field/attribute flavorRef"]),
    ("networks-auto-2.1", "post", "/v2.1/servers", server(networks="auto"), {},
     ["field/attribute networks", "is not of type 'array'"]),
    ("networks-none-2.36", "post", "/v2.1/servers", server(networks="none"), V236,
     ["field/attribute networks", "is not of type 'array'"]),
    ("networks-missing-2.37", "post", "/v2.1/servers", server(), V237, ["'networks' is a required property"]),
    ("networks-bogus-2.37", "post", "/v2.1/servers", server(networks="everything"), V237,
     ["field/attribute networks"]),
    ("network-uuid-bad", "post", "/v2.1/servers", server(networks=[{"uuid": "net-1"}]), {},
     ["field/attribute uuid", "net-1"]),
    ("network-port-bad", "post", "/v2.1/servers", server(networks=[{"port": "port-1"}]), {},
     ["field/attribute port", "port-1"]),
    ("network-fixed-ip-bad", "post", "/v2.1/servers",
     server(networks=[{"uuid": NET, "fixed_ip": "10.0.0.300"}]), {}, ["field/attribute fixed_ip"]),
    ("network-entry-empty", "post", "/v2.1/servers", server(networks=[{}]), {}, ["uuid"]),
    ("network-entry-unknown-key", "post", "/v2.1/servers", server(networks=[{"uuid": NET, "vlan": 5}]), {},
     ["'vlan' was unexpected"]),
    ("min-gt-max", "post", "/v2.1/servers", server(min_count=3, max_count=2), {},
     ["min_count must be <= max_count"]),
    ("min-count-text", "post", "/v2.1/servers", server(min_count="two"), {}, ["field/attribute min_count"]),
    ("max-count-zero", "post", "/v2.1/servers", server(max_count=0), {}, ["field/attribute max_count"]),
    ("min-count-float", "post", "/v2.1/servers", server(min_count=1.5), {}, ["field/attribute min_count"]),
    ("max-count-negative-text", "post", "/v2.1/servers", server(max_count="-1"), {},
     ["field/attribute max_count"]),
    ("metadata-not-object", "post", "/v2.1/servers", server(metadata=["a"]), {}, ["field/attribute metadata"]),
    ("metadata-key-long", "post", "/v2.1/servers", server(metadata={"k" * 256: "v"}), {},
     ["field/attribute metadata"]),
    ("metadata-key-empty", "post", "/v2.1/servers", server(metadata={"": "v"}), {}, ["field/attribute metadata"]),
    ("metadata-key-slash", "post", "/v2.1/servers", server(metadata={"a/b": "v"}), {},
     ["field/attribute metadata"]),
    ("metadata-value-int", "post", "/v2.1/servers", server(metadata={"size": 5}), {},
     ["field/attribute size", "is not of type 'string'"]),
    ("metadata-value-long", "post", "/v2.1/servers", server(metadata={"size": "v" * 256}), {},
     ["field/attribute size", "too long"]),
    ("user-data-not-base64", "post", "/v2.1/servers", server(user_data="not base64!"), {},
     ["field/attribute user_data"]),
    ("user-data-too-long", "post", "/v2.1/servers", server(user_data="QUFB" * 16384 + "QQ=="), {},
     ["field/attribute user_data"]),
    ("security-groups-not-list", "post", "/v2.1/servers", server(security_groups="default"), {},
     ["field/attribute security_groups"]),
    ("security-group-no-name", "post", "/v2.1/servers", server(security_groups=[{"id": "x"}]), {},
     ["'name' is a required property"]),
    ("availability-zone-empty", "post", "/v2.1/servers", server(availability_zone=""), {},
     ["field/attribute availability_zone"]),
    ("key-name-empty", "post", "/v2.1/servers", server(key_name=""), {}, ["field/attribute key_name"]),
    ("key-name-not-string", "post", "/v2.1/servers", server(key_name=5), {}, ["field/attribute key_name"]),
    ("return-reservation-id-bad", "post", "/v2.1/servers", server(return_reservation_id="maybe"), {},
     ["field/attribute return_reservation_id"]),
    ("access-ipv4-bad", "post", "/v2.1/servers", server(accessIPv4="1.2.3"), {}, ["field/attribute accessIPv4"]),
    ("unknown-attribute", "post", "/v2.1/servers", server(flavor="1"), {}, ["'flavor' was unexpected"]),
    ("description-before-2.19", "post", "/v2.1/servers", server(description="d"), {},
     ["'description' was unexpected"]),
    ("description-too-long", "post", "/v2.1/servers", server(description="d" * 256), V219,
     ["field/attribute description"]),
    ("bdm-volume", "post", "/v2.1/servers",
     server(block_device_mapping_v2=[{"source_type": "volume", "uuid": IMAGE, "destination_type": "volume",
                                      "boot_index": 0}]), {}, ["Block Device Mapping"]),
    # Update.
    ("update-no-server", "put", f"/v2.1/servers/{SERVER}", {"name": "x"}, {}, ["'server' is a required property"]),
    ("update-empty-name", "put", f"/v2.1/servers/{SERVER}", {"server": {"name": ""}}, {},
     ["field/attribute name"]),
    ("update-unknown-attribute", "put", f"/v2.1/servers/{SERVER}", {"server": {"flavorRef": "2"}}, {},
     ["'flavorRef' was unexpected"]),
    ("update-description-2.1", "put", f"/v2.1/servers/{SERVER}", {"server": {"description": "d"}}, {},
     ["'description' was unexpected"]),
    # Actions.
    ("action-unknown", "post", ACTION, {"os-explode": None}, {}, ["There is no such action: os-explode"]),
    ("action-two-at-once", "post", ACTION, {"os-stop": None, "os-start": None}, {}, ["Malformed request body"]),
    ("action-empty", "post", ACTION, {}, {}, ["Malformed request body"]),
    ("reboot-type-bad", "post", ACTION, {"reboot": {"type": "GENTLE"}}, {},
     ["field/attribute type", "GENTLE"]),
    ("reboot-type-missing", "post", ACTION, {"reboot": {}}, {}, ["'type' is a required property"]),
    ("reboot-not-object", "post", ACTION, {"reboot": "HARD"}, {}, ["field/attribute reboot"]),
    ("stop-with-args", "post", ACTION, {"os-stop": {"force": True}}, {}, ["field/attribute os-stop"]),
    ("lock-reason-before-2.73", "post", ACTION, {"lock": {"locked_reason": "why"}}, {}, ["locked_reason"]),
    ("rescue-no-argument", "post", ACTION, {"rescue": "now"}, {}, ["field/attribute rescue"]),
    ("rescue-image-not-uuid", "post", ACTION, {"rescue": {"rescue_image_ref": "cirros"}}, {},
     ["field/attribute rescue_image_ref"]),
    ("rescue-password-not-string", "post", ACTION, {"rescue": {"adminPass": 5}}, {},
     ["field/attribute adminPass"]),
    ("rescue-unknown-key", "post", ACTION, {"rescue": {"image": IMAGE}}, {}, ["'image' was unexpected"]),
    ("unrescue-argument", "post", ACTION, {"unrescue": "now"}, {}, ["field/attribute unrescue"]),
    # Personality (before 2.57).
    ("personality-not-list", "post", "/v2.1/servers", server(personality={"path": "/x"}), {},
     ["field/attribute personality"]),
    ("personality-not-base64", "post", "/v2.1/servers", server(personality=[{"path": "/x", "contents": "!!"}]),
     {}, ["field/attribute contents"]),
    ("personality-unknown-key", "post", "/v2.1/servers",
     server(personality=[{"path": "/x", "contents": "eA==", "mode": "0600"}]), {}, ["'mode' was unexpected"]),
    ("personality-no-path", "post", "/v2.1/servers", server(personality=[{"contents": "eA=="}]), {},
     ["Bad personality format: missing 'path'"]),
    ("personality-2.57", "post", "/v2.1/servers", server(personality=[], networks="none"), version("2.57"),
     ["'personality' was unexpected"]),
    ("rebuild-personality-not-base64", "post", ACTION,
     {"rebuild": {"imageRef": IMAGE, "personality": [{"path": "/x", "contents": "%%"}]}}, {},
     ["field/attribute contents"]),
    # Metadata.
    ("metadata-body-missing-key", "post", f"/v2.1/servers/{SERVER}/metadata", {"meta": {"a": "b"}}, {},
     ["'metadata' is a required property"]),
    ("metadata-value-not-string", "put", f"/v2.1/servers/{SERVER}/metadata", {"metadata": {"a": 1}}, {},
     ["field/attribute a"]),
    ("meta-item-two-keys", "put", f"/v2.1/servers/{SERVER}/metadata/a", {"meta": {"a": "1", "b": "2"}}, {},
     ["field/attribute meta"]),
    ("meta-item-uri-mismatch", "put", f"/v2.1/servers/{SERVER}/metadata/a", {"meta": {"b": "2"}}, {},
     ["Request body and URI mismatch"]),
    # List queries.
    ("limit-text", "get", "/v2.1/servers?limit=ten", None, {}, ["limit"]),
    ("limit-negative", "get", "/v2.1/servers/detail?limit=-1", None, {}, ["limit"]),
    ("changes-since-bad", "get", "/v2.1/servers?changes-since=yesterday", None, {}, ["changes-since"]),
]


@pytest.mark.parametrize("method,path,body,headers,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_bad_server_request(client, method, path, body, headers, words):
    kwargs = {"headers": headers}
    if body is not None:
        kwargs["json"] = body
    r = await client.request(method.upper(), path, **kwargs)
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"badRequest"}, r.text
    fault = r.json()["badRequest"]
    assert fault["code"] == 400
    for word in words:
        assert word in fault["message"], fault["message"]


@pytest.mark.parametrize("path", ["/v2.1/servers", ACTION, f"/v2.1/servers/{SERVER}/metadata"])
@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe"])
async def test_malformed_bodies_are_400(client, path, content):
    r = await client.post(path, content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "badRequest" in r.json() and r.json()["badRequest"]["message"]
    r = await client.put(f"/v2.1/servers/{SERVER}", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
