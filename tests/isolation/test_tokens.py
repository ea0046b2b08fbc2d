"""401 on every API for a missing, malformed, revoked or expired token, or one whose user or project
was disabled — each in that API's own error body, with Keystone's WWW-Authenticate header."""

from __future__ import annotations

import time

import pytest

from .helpers import Tenancy, login, start_nefos, stop_nefos

# One authenticated GET per API.
PROBES = [("compute", "/servers"), ("compute", "/flavors"), ("network", "/v2.0/networks"),
          ("image", "/v2/images"), ("identity", "/auth/projects")]


def assert_unauthorized(r, service: str) -> None:
    assert r.status_code == 401, (service, str(r.request.url), r.status_code, r.text)
    assert r.headers.get("www-authenticate", "").startswith("Keystone uri="), r.headers
    body = r.json()
    if service == "compute":
        assert body["unauthorized"]["code"] == 401, body
    elif service == "network":
        assert "NeutronError" in body, body
    elif service == "image":
        assert body["code"].startswith("401"), body
    else:
        assert body["error"]["code"] == 401 and body["error"]["title"] == "Unauthorized", body


def test_missing_and_garbage_tokens(tenancy: Tenancy):
    api = tenancy.a
    for service, path in PROBES:
        r = api.http.get(api.url(service, path))  # no X-Auth-Token at all
        assert_unauthorized(r, service)
        for bad in ("garbage", "gAAAAA" + "A" * 200, tenancy.a.token[:-4] + "AAAA", "x" * 10000):
            assert_unauthorized(api.get(service, path, token=bad), service)


def test_revoked_token(tenancy: Tenancy):
    name, pw, project = tenancy.passwords["a"]
    victim = login(tenancy.auth_url, name, pw, project)
    for service, path in PROBES:
        assert victim.get(service, path).status_code == 200
    r = tenancy.a.delete("identity", "/auth/tokens", headers={"X-Subject-Token": victim.token})
    assert r.status_code == 204, r.text
    for service, path in PROBES:
        assert_unauthorized(victim.get(service, path), service)
    assert tenancy.a.get("compute", "/servers").status_code == 200  # only that token


def test_token_of_disabled_project_and_user(tenancy: Tenancy):
    admin = tenancy.admin
    r = admin.post("identity", "/projects", {"project": {"name": "iso-tmp", "domain_id": "default"}})
    project = r.json()["project"]["id"]
    r = admin.post("identity", "/users", {"user": {"name": "iso-tmp-user", "password": "pw-tmp-123",
                                                   "domain_id": "default"}})
    user = r.json()["user"]["id"]
    roles = {x["name"]: x["id"] for x in admin.get("identity", "/roles").json()["roles"]}
    assert admin.put("identity", f"/projects/{project}/users/{user}/roles/{roles['member']}").status_code == 204
    first = login(tenancy.auth_url, "iso-tmp-user", "pw-tmp-123", "iso-tmp")
    assert first.get("compute", "/servers").status_code == 200
    assert admin.patch("identity", f"/projects/{project}", {"project": {"enabled": False}}).status_code == 200
    for service, path in PROBES:
        assert_unauthorized(first.get(service, path), service)
    assert admin.patch("identity", f"/projects/{project}", {"project": {"enabled": True}}).status_code == 200
    second = login(tenancy.auth_url, "iso-tmp-user", "pw-tmp-123", "iso-tmp")
    assert second.get("compute", "/servers").status_code == 200
    assert admin.patch("identity", f"/users/{user}", {"user": {"enabled": False}}).status_code == 200
    for service, path in PROBES:
        assert_unauthorized(second.get(service, path), service)
    # Role removed: the token goes too.
    assert admin.patch("identity", f"/users/{user}", {"user": {"enabled": True}}).status_code == 200
    third = login(tenancy.auth_url, "iso-tmp-user", "pw-tmp-123", "iso-tmp")
    assert third.get("network", "/v2.0/networks").status_code == 200
    assert admin.delete("identity", f"/projects/{project}/users/{user}/roles/{roles['member']}").status_code == 204
    for service, path in PROBES:
        assert_unauthorized(third.get(service, path), service)


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    """A second cloud whose tokens live 3 seconds."""
    state = tmp_path_factory.mktemp("nefos-short-tokens")
    proc, clouds = start_nefos(state, {"NEFOS_TOKEN_EXPIRATION": "3"})
    yield clouds
    stop_nefos(proc, state)


def test_expired_token(short_lived):
    demo = short_lived["nefos"]["auth"]
    api = login(demo["auth_url"].rstrip("/"), demo["username"], demo["password"], demo["project_name"])
    for service, path in PROBES:
        assert api.get(service, path).status_code == 200
    time.sleep(3.5)
    for service, path in PROBES:
        r = api.get(service, path)
        assert_unauthorized(r, service)
    r = api.http.get(api.url("compute", "/servers"), headers={"X-Auth-Token": api.token})
    assert "expired" in r.text
    # Validating it (as the user, with a fresh token) says 404, Keystone's answer for a dead subject token.
    fresh = login(demo["auth_url"].rstrip("/"), demo["username"], demo["password"], demo["project_name"])
    r = fresh.get("identity", "/auth/tokens", headers={"X-Subject-Token": api.token})
    assert r.status_code == 404, r.text


def _tampered(token: str) -> list[str]:
    middle = len(token) // 2
    flipped = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]
    return [flipped, token[:-1], token[: len(token) // 2], token + "A", token + "=", token + "==",
            token.swapcase(), token[1:], token[:20] + "." + token[21:]]


def test_modified_truncated_and_another_deployments_tokens(tenancy: Tenancy, short_lived):
    for bad in _tampered(tenancy.a.token) + _tampered(tenancy.admin.token):
        for service, path in PROBES:
            assert_unauthorized(tenancy.a.get(service, path, token=bad), service)
    # A valid token of another deployment (its own Fernet keys, its own users) is nobody here.
    other = short_lived["nefos-admin"]["auth"]
    foreign = login(other["auth_url"].rstrip("/"), other["username"], other["password"], other["project_name"])
    assert foreign.get("compute", "/servers").status_code == 200  # valid where it was issued
    for service, path in PROBES:
        assert_unauthorized(tenancy.a.get(service, path, token=foreign.token), service)
    assert tenancy.a.get("compute", "/servers").status_code == 200
