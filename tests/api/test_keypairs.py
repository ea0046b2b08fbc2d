"""/v2.1/os-keypairs: generate, import, list (paging), show, delete, per microversion; quota."""

from __future__ import annotations

import base64
import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.api.conftest import PROJECT, USER, member, version
from tests.schemas import assert_schema


def _ssh_public_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate()
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode() + " me@host"


def _md5_fingerprint(public_key: str) -> str:
    digest = hashlib.md5(base64.b64decode(public_key.split()[1])).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, 32, 2))


async def test_generate_v21(client):
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "gen"}}, headers=member())
    kp = assert_schema("keypairs.create_keypair", r)["keypair"]
    assert r.status_code == 200 and "type" not in kp
    assert kp["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert kp["public_key"].startswith("ssh-rsa ")
    assert kp["fingerprint"] == _md5_fingerprint(kp["public_key"])
    assert kp["user_id"] == USER
    private = serialization.load_pem_private_key(kp["private_key"].encode(), password=None)
    ours = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert kp["public_key"].startswith(ours.decode())
    r = await client.get("/v2.1/os-keypairs/gen", headers=member())
    shown = assert_schema("keypairs.get_keypair", r)["keypair"]
    assert shown["fingerprint"] == kp["fingerprint"] and shown["deleted"] is False
    r = await client.delete("/v2.1/os-keypairs/gen", headers=member())
    assert_schema("keypairs.delete_keypair", r)
    assert r.status_code == 202


async def test_import_and_views_v22(client, rt):
    pub = _ssh_public_key()
    h = version("2.2", member())
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "imp", "public_key": pub}}, headers=h)
    kp = assert_schema("keypairs.create_keypair", r)["keypair"]
    assert r.status_code == 201
    assert kp["type"] == "ssh" and "private_key" not in kp
    assert kp["fingerprint"] == _md5_fingerprint(pub) and kp["public_key"] == pub
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "cert", "type": "x509"}}, headers=h)
    cert = assert_schema("keypairs.create_keypair", r)["keypair"]
    assert cert["type"] == "x509" and cert["public_key"].startswith("-----BEGIN CERTIFICATE-----")
    assert len(cert["fingerprint"].split(":")) == 20
    r = await client.get("/v2.1/os-keypairs", headers=h)
    body = assert_schema("keypairs.list_keypairs", r)
    assert [k["keypair"]["name"] for k in body["keypairs"]] == ["cert", "imp"]
    assert {k["keypair"]["type"] for k in body["keypairs"]} == {"ssh", "x509"}
    r = await client.get("/v2.1/os-keypairs/imp", headers=h)
    assert assert_schema("keypairs.get_keypair", r)["keypair"]["type"] == "ssh"
    # Another user sees none of them.
    r = await client.get("/v2.1/os-keypairs", headers=version("2.2", member(user="v" * 32)))
    assert r.json() == {"keypairs": []}
    assert (await client.get("/v2.1/os-keypairs/imp", headers=member(user="v" * 32))).status_code == 404
    r = await client.delete("/v2.1/os-keypairs/imp", headers=h)
    assert_schema("keypairs.delete_keypair", r)
    assert r.status_code == 204
    from nefos.control.compute.keypairs import get_keypair
    assert (await get_keypair(rt.db, USER, "cert"))["type"] == "x509"


async def test_duplicate_and_not_found(client):
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "dup", "public_key": _ssh_public_key()}})
    assert r.status_code == 200
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "dup", "public_key": _ssh_public_key()}})
    assert r.status_code == 409
    assert r.json() == {"conflictingRequest": {"code": 409, "message": "Key pair 'dup' already exists."}}
    r = await client.get("/v2.1/os-keypairs/missing")
    assert r.status_code == 404
    assert r.json()["itemNotFound"]["message"].startswith("Keypair missing not found for user")
    assert (await client.delete("/v2.1/os-keypairs/missing")).status_code == 404


async def test_admin_acts_for_another_user_v210(client):
    h = version("2.10")
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "theirs", "user_id": USER,
                                                                 "public_key": _ssh_public_key()}}, headers=h)
    assert assert_schema("keypairs.create_keypair", r)["keypair"]["user_id"] == USER
    r = await client.get("/v2.1/os-keypairs", params={"user_id": USER}, headers=h)
    assert [k["keypair"]["name"] for k in r.json()["keypairs"]] == ["theirs"]
    r = await client.get("/v2.1/os-keypairs/theirs", params={"user_id": USER}, headers=h)
    assert r.json()["keypair"]["user_id"] == USER
    assert (await client.get("/v2.1/os-keypairs/theirs", headers=version("2.10", member()))).status_code == 200
    # A member may not act for someone else.
    r = await client.get("/v2.1/os-keypairs", params={"user_id": "z" * 32}, headers=version("2.10", member()))
    assert r.status_code == 403
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "x", "user_id": "z" * 32}},
                          headers=version("2.10", member()))
    assert r.status_code == 403
    r = await client.delete("/v2.1/os-keypairs/theirs", params={"user_id": USER}, headers=h)
    assert r.status_code == 204


async def test_paging_v235(client):
    h = version("2.35", member())
    for name in ("c", "a", "b"):
        r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": name, "public_key": _ssh_public_key()}},
                              headers=h)
        assert r.status_code == 201
    r = await client.get("/v2.1/os-keypairs", params={"limit": 2}, headers=h)
    body = r.json()
    assert [k["keypair"]["name"] for k in body["keypairs"]] == ["a", "b"]
    assert "marker=b" in body["keypairs_links"][0]["href"]
    r = await client.get("/v2.1/os-keypairs", params={"limit": 2, "marker": "b"}, headers=h)
    assert [k["keypair"]["name"] for k in r.json()["keypairs"]] == ["c"]
    r = await client.get("/v2.1/os-keypairs", params={"marker": "nope"}, headers=h)
    assert r.status_code == 400
    # Before 2.35 paging parameters are ignored.
    r = await client.get("/v2.1/os-keypairs", params={"limit": 1}, headers=version("2.34", member()))
    assert len(r.json()["keypairs"]) == 3 and "keypairs_links" not in r.json()


async def test_quota(client):
    r = await client.put(f"/v2.1/os-quota-sets/{PROJECT}", json={"quota_set": {"key_pairs": 1}})
    assert r.status_code == 200
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "one", "public_key": _ssh_public_key()}},
                          headers=member())
    assert r.status_code == 200
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "two", "public_key": _ssh_public_key()}},
                          headers=member())
    assert r.status_code == 403
    assert r.json() == {"forbidden": {"code": 403, "message": "Quota exceeded, too many key pairs."}}
    r = await client.get(f"/v2.1/os-quota-sets/{PROJECT}/detail", headers=member())
    assert r.json()["quota_set"]["key_pairs"] == {"limit": 1, "in_use": 1, "reserved": 0}
    assert (await client.delete("/v2.1/os-keypairs/one", headers=member())).status_code == 202
    r = await client.post("/v2.1/os-keypairs", json={"keypair": {"name": "two", "public_key": _ssh_public_key()}},
                          headers=member())
    assert r.status_code == 200
