"""Tokens over HTTP: issue, validate, revoke, expiry, rescoping, and the 4xx answers to bad input."""

from __future__ import annotations

import asyncio
import os
import stat
import threading

import pytest
from identity_helpers import auth, get_token, password_auth, project_scope

from nefos import exceptions
from nefos.clients.identity import tokens


def assert_keystone_error(r, status: int, title: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and err["title"] == title and err["message"]


async def test_version_documents(api):
    r = await api.get("/")
    assert r.status_code == 300
    (v3,) = r.json()["versions"]["values"]
    assert v3["id"].startswith("v3.") and v3["status"] == "stable"
    assert v3["links"][0]["href"] == "http://identity.test/v3/"
    r = await api.get("/v3")
    assert r.status_code == 200
    assert r.json()["version"]["media-types"][0]["type"] == "application/vnd.openstack.identity-v3+json"


async def test_issue_validate_revoke(api, creds):
    r = await api.post("/v3/auth/tokens", json=password_auth(
        "admin", creds["admin"]["password"], scope=project_scope("admin")))
    assert r.status_code == 201, r.text
    token = r.headers["x-subject-token"]
    body = r.json()["token"]
    assert body["methods"] == ["password"]
    assert body["user"] == {"id": creds["admin"]["user_id"], "name": "admin",
                            "domain": {"id": "default", "name": "Default"}, "password_expires_at": None}
    assert body["project"] == {"id": creds["admin"]["project_id"], "name": "admin",
                               "domain": {"id": "default", "name": "Default"}}
    assert {"admin", "member", "reader"} <= {role["name"] for role in body["roles"]}  # admin implies the others
    assert body["issued_at"].endswith("Z") and body["expires_at"] > body["issued_at"]
    assert len(body["audit_ids"]) == 1
    types = {svc["type"]: svc for svc in body["catalog"]}
    assert set(types) == {"identity", "compute", "network", "image"}
    port = api._transport.app.state.rt.cfg.identity_api_port
    assert {(e["interface"], e["region"], e["url"]) for e in types["identity"]["endpoints"]} == {
        (i, "RegionOne", f"http://127.0.0.1:{port}/v3") for i in ("public", "internal", "admin")}
    assert all(e["url"].endswith("/v2.1") for e in types["compute"]["endpoints"])

    # Validate (GET and HEAD), then revoke.
    r = await api.get("/v3/auth/tokens", headers=auth(token, **{"X-Subject-Token": token}))
    assert r.status_code == 200
    assert r.headers["x-subject-token"] == token
    assert r.json()["token"]["audit_ids"] == body["audit_ids"]
    r = await api.head("/v3/auth/tokens", headers=auth(token, **{"X-Subject-Token": token}))
    assert r.status_code == 200
    r = await api.get("/v3/auth/tokens?nocatalog", headers=auth(token, **{"X-Subject-Token": token}))
    assert "catalog" not in r.json()["token"]

    other = await get_token(api, "admin", creds["admin"]["password"], "admin")
    r = await api.delete("/v3/auth/tokens", headers=auth(other, **{"X-Subject-Token": token}))
    assert r.status_code == 204
    r = await api.get("/v3/auth/tokens", headers=auth(other, **{"X-Subject-Token": token}))
    assert_keystone_error(r, 404, "Not Found")
    r = await api.get("/v3/users", headers=auth(token))
    assert_keystone_error(r, 401, "Unauthorized")
    assert r.headers["www-authenticate"].startswith('Keystone uri="http://127.0.0.1:')
    # The other token is untouched.
    assert (await api.get("/v3/users", headers=auth(other))).status_code == 200


async def test_validate_garbage_subject_is_404(api, admin_token):
    r = await api.get("/v3/auth/tokens", headers=auth(admin_token, **{"X-Subject-Token": "not-a-token"}))
    assert_keystone_error(r, 404, "Not Found")
    r = await api.get("/v3/auth/tokens", headers=auth("not-a-token", **{"X-Subject-Token": admin_token}))
    assert_keystone_error(r, 401, "Unauthorized")


async def test_member_cannot_validate_someone_elses_token(api, admin_token, demo_token):
    r = await api.get("/v3/auth/tokens", headers=auth(demo_token, **{"X-Subject-Token": admin_token}))
    assert_keystone_error(r, 403, "Forbidden")
    r = await api.get("/v3/auth/tokens", headers=auth(demo_token, **{"X-Subject-Token": demo_token}))
    assert r.status_code == 200


async def test_service_role_validates_but_does_not_revoke_others_tokens(api, creds, admin_token, demo_token):
    """Keystone's defaults: validate_token admits the service role, revoke_token only an admin or the
    token's own user (a service user revoking anyone's token would be a denial of service)."""
    admin = auth(admin_token)
    r = await api.post("/v3/users", headers=admin, json={"user": {"name": "svc-only", "password": "svc-pw-1",
                                                                   "domain_id": "default"}})
    assert r.status_code == 201, r.text
    user_id = r.json()["user"]["id"]
    roles = {x["name"]: x["id"] for x in (await api.get("/v3/roles", headers=admin)).json()["roles"]}
    r = await api.put(f"/v3/projects/{creds['service']['project_id']}/users/{user_id}/roles/{roles['service']}",
                      headers=admin)
    assert r.status_code == 204, r.text
    service_token = await get_token(api, "svc-only", "svc-pw-1", "service")
    subject = {"X-Subject-Token": demo_token}
    assert (await api.get("/v3/auth/tokens", headers=auth(service_token, **subject))).status_code == 200
    r = await api.delete("/v3/auth/tokens", headers=auth(service_token, **subject))
    assert_keystone_error(r, 403, "Forbidden")
    assert (await api.get("/v3/auth/tokens", headers=auth(demo_token, **subject))).status_code == 200
    assert (await api.delete("/v3/auth/tokens", headers=auth(admin_token, **subject))).status_code == 204


@pytest.mark.parametrize("cfg_overrides", [{"token_expiration": 1}])
async def test_token_expires(api, rt, creds, cfg_overrides):
    token = await get_token(api, "demo", creds["demo"]["password"], "demo")
    assert (await tokens.validate_token(rt, token)).user_id == creds["demo"]["user_id"]
    await asyncio.sleep(1.1)
    r = await api.get("/v3/auth/tokens", headers=auth(token, **{"X-Subject-Token": token}))
    assert_keystone_error(r, 401, "Unauthorized")
    with pytest.raises(exceptions.Unauthorized):
        await tokens.validate_token(rt, token)


async def test_validate_token_gives_context(rt, api, creds, demo_token, admin_token):
    ctx = await tokens.validate_token(rt, demo_token)
    assert (ctx.user_id, ctx.project_id) == (creds["demo"]["user_id"], creds["demo"]["project_id"])
    assert set(ctx.roles) == {"member", "reader"} and not ctx.is_admin
    ctx = await tokens.validate_token(rt, admin_token)
    assert ctx.is_admin and "admin" in ctx.roles
    for bad in ("", "x" * 50, demo_token[:-4] + "AAAA"):
        with pytest.raises(exceptions.Unauthorized):
            await tokens.validate_token(rt, bad)


async def test_wrong_password_unknown_user_and_project_are_401(api, creds):
    pw = creds["demo"]["password"]
    for body in (
        password_auth("demo", "wrong", scope=project_scope("demo")),
        password_auth("nobody", pw, scope=project_scope("demo")),
        password_auth("demo", pw, domain={"name": "NoSuchDomain"}),
        password_auth("x", pw, user_id="0" * 32),
        password_auth("demo", pw, scope=project_scope("no-such-project")),
        password_auth("demo", pw, scope={"project": {"id": "0" * 32}}),
        password_auth("demo", pw, scope=project_scope("admin")),  # exists, but demo has no role there
        password_auth("demo", pw, scope={"domain": {"id": "default"}}),  # no role on the domain
        {"auth": {"identity": {"methods": ["token"], "token": {"id": "garbage"}}}},
        {"auth": {"identity": {"methods": ["totp"], "totp": {}}}},
    ):
        r = await api.post("/v3/auth/tokens", json=body)
        assert_keystone_error(r, 401, "Unauthorized")
        assert "www-authenticate" in r.headers
        assert "x-subject-token" not in r.headers


async def test_malformed_auth_bodies_are_400(api, creds):
    pw = creds["demo"]["password"]
    r = await api.post("/v3/auth/tokens", content=b"{not json", headers={"Content-Type": "application/json"})
    assert_keystone_error(r, 400, "Bad Request")
    r = await api.post("/v3/auth/tokens")
    assert_keystone_error(r, 400, "Bad Request")
    for body in (
        [], "auth", {}, {"auth": []}, {"auth": {}}, {"auth": {"identity": {}}},
        {"auth": {"identity": {"methods": "password"}}},
        {"auth": {"identity": {"methods": []}}},
        {"auth": {"identity": {"methods": [1]}}},
        {"auth": {"identity": {"methods": ["password"]}}},
        {"auth": {"identity": {"methods": ["password"], "password": "x"}}},
        {"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "demo", "password": pw}}}}},
        {"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "demo", "domain": {}}}}}},
        {"auth": {"identity": {"methods": ["password"], "password": {"user": {"password": pw}}}}},
        {"auth": {"identity": {"methods": ["password"],
                               "password": {"user": {"name": "demo", "domain": {"id": "default"}, "password": 5}}}}},
        {"auth": {"identity": {"methods": ["token"], "token": {}}}},
        password_auth("demo", pw, scope={"project": {"name": "demo"}}),  # project name needs a domain
        password_auth("demo", pw, scope={"project": {"id": "x"}, "domain": {"id": "default"}}),
        password_auth("demo", pw, scope={"system": {"all": True}}),
        password_auth("demo", pw, scope=["project"]),
        password_auth("demo", pw, scope={"project": "demo"}),
    ):
        r = await api.post("/v3/auth/tokens", json=body)
        assert_keystone_error(r, 400, "Bad Request")


async def test_unscoped_default_project_and_rescope(api, creds):
    pw = creds["demo"]["password"]
    # No scope: the user's default project.
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert r.status_code == 201
    assert r.json()["token"]["project"]["name"] == "demo"
    # Explicitly unscoped: no roles, no project, empty catalog.
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw, scope="unscoped"))
    assert r.status_code == 201
    unscoped = r.headers["x-subject-token"]
    body = r.json()["token"]
    assert "project" not in body and "roles" not in body and body["catalog"] == []
    r = await api.get("/v3/auth/catalog", headers=auth(unscoped))
    assert_keystone_error(r, 403, "Forbidden")
    r = await api.get("/v3/auth/projects", headers=auth(unscoped))
    assert [p["name"] for p in r.json()["projects"]] == ["demo"]
    # Rescope with the token method: same user, keeps the expiry, chains the audit id.
    r = await api.post("/v3/auth/tokens", json={"auth": {
        "identity": {"methods": ["token"], "token": {"id": unscoped}}, "scope": project_scope("demo")}})
    assert r.status_code == 201, r.text
    scoped = r.json()["token"]
    assert scoped["methods"] == ["password", "token"]
    assert scoped["expires_at"] == body["expires_at"]
    assert scoped["audit_ids"][1] == body["audit_ids"][0]
    r = await api.get("/v3/auth/catalog", headers=auth(r.headers["x-subject-token"]))
    assert r.status_code == 200 and len(r.json()["catalog"]) == 4


async def test_auth_by_user_id_and_domain_id(api, creds):
    r = await api.post("/v3/auth/tokens", json=password_auth(
        "", creds["admin"]["password"], user_id=creds["admin"]["user_id"],
        scope={"project": {"id": creds["admin"]["project_id"]}}))
    assert r.status_code == 201
    r = await api.post("/v3/auth/tokens", json=password_auth(
        "admin", creds["admin"]["password"], domain={"id": "default"},
        scope={"project": {"name": "admin", "domain": {"name": "Default"}}}))
    assert r.status_code == 201


async def test_token_unusable_after_role_removed_password_changed_user_disabled(api, rt, creds, admin_token):
    demo_pw = creds["demo"]["password"]
    user, project = creds["demo"]["user_id"], creds["demo"]["project_id"]
    token = await get_token(api, "demo", demo_pw, "demo")
    roles = {r["name"]: r["id"] for r in (await api.get("/v3/roles", headers=auth(admin_token))).json()["roles"]}

    r = await api.delete(f"/v3/projects/{project}/users/{user}/roles/{roles['reader']}", headers=auth(admin_token))
    assert r.status_code == 204
    with pytest.raises(exceptions.Unauthorized):
        await tokens.validate_token(rt, token)
    token = await get_token(api, "demo", demo_pw, "demo")  # still a member: a new token works
    assert (await tokens.validate_token(rt, token)).roles == ["member", "reader"]  # member implies reader

    r = await api.post(f"/v3/users/{user}/password", headers=auth(token),
                       json={"user": {"original_password": "wrong", "password": "new-pw"}})
    assert_keystone_error(r, 401, "Unauthorized")
    r = await api.post(f"/v3/users/{user}/password", headers=auth(token),
                       json={"user": {"original_password": demo_pw, "password": "new-pw"}})
    assert r.status_code == 204
    with pytest.raises(exceptions.Unauthorized):
        await tokens.validate_token(rt, token)
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", demo_pw, scope=project_scope("demo")))
    assert r.status_code == 401
    token = await get_token(api, "demo", "new-pw", "demo")

    r = await api.patch(f"/v3/users/{user}", headers=auth(admin_token), json={"user": {"enabled": False}})
    assert r.status_code == 200 and r.json()["user"]["enabled"] is False
    with pytest.raises(exceptions.Unauthorized):
        await tokens.validate_token(rt, token)
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", "new-pw", scope=project_scope("demo")))
    assert r.status_code == 401


@pytest.mark.parametrize("cfg_overrides", [{"lockout_failure_attempts": 2, "lockout_duration": 60}])
async def test_lockout_after_failed_logins(api, creds, cfg_overrides):
    pw = creds["demo"]["password"]
    for _ in range(2):
        r = await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))
        assert r.status_code == 401
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert_keystone_error(r, 401, "Unauthorized")
    assert "locked" in r.json()["error"]["message"]
    r = await api.post("/v3/auth/tokens", json=password_auth("admin", creds["admin"]["password"]))
    assert r.status_code == 201  # others are unaffected


async def test_lockout_is_on_with_the_shipped_defaults_and_locks_the_admin_too(api, rt, creds):
    """Keystone's lockout_failure_attempts, on by default (6 failures in a row lock a user for
    lockout_duration): the admin role exempts nobody, so the admin's password cannot be guessed
    without limit; once locked, the right password is refused without its hash being computed."""
    from nefos.config import Config
    from nefos.control.identity import passwords
    defaults = Config()
    assert rt.cfg.lockout_failure_attempts == defaults.lockout_failure_attempts == 6
    assert rt.cfg.lockout_duration == defaults.lockout_duration == 1800.0
    for user in ("demo", "admin"):
        for _ in range(defaults.lockout_failure_attempts):
            r = await api.post("/v3/auth/tokens", json=password_auth(user, "wrong"))
            assert r.status_code == 401
    computed, runs = passwords.verify_password_sync, []
    passwords.verify_password_sync = lambda *a: runs.append(1) or computed(*a)
    try:
        for user in ("demo", "admin"):
            r = await api.post("/v3/auth/tokens", json=password_auth(user, creds[user]["password"]))
            assert_keystone_error(r, 401, "Unauthorized")
            assert "locked" in r.json()["error"]["message"]
    finally:
        passwords.verify_password_sync = computed
    assert runs == []


async def test_the_services_account_is_never_locked_out_with_the_shipped_defaults(api, rt, creds):
    """The account the cloud's services sign in with carries Keystone's
    ignore_lockout_failure_attempts from bootstrap: guessing at its name cannot stop the services."""
    service = creds["service"]
    for _ in range(rt.cfg.lockout_failure_attempts + 3):
        r = await api.post("/v3/auth/tokens", json=password_auth(service["username"], "wrong"))
        assert r.status_code == 401 and "locked" not in r.json()["error"]["message"]
    token = await get_token(api, service["username"], service["password"], service["project_name"])
    r = await api.get(f"/v3/users/{service['user_id']}", headers=auth(token))
    assert r.status_code == 200, r.text
    assert r.json()["user"]["options"] == {"ignore_lockout_failure_attempts": True}


@pytest.mark.parametrize("cfg_overrides", [{"lockout_failure_attempts": 2, "lockout_duration": 60}])
async def test_ignore_lockout_failure_attempts_is_set_and_unset_per_user(api, creds, admin_token,
                                                                          cfg_overrides):
    """Keystone's user option, set with PATCH /v3/users/{id} {"user": {"options": {...}}} and
    unset with null: while set, failures never lock the user out; once unset, they do."""
    demo_id, pw = creds["demo"]["user_id"], creds["demo"]["password"]
    r = await api.patch(f"/v3/users/{demo_id}", headers=auth(admin_token),
                        json={"user": {"options": {"ignore_lockout_failure_attempts": True}}})
    assert r.status_code == 200, r.text
    assert r.json()["user"]["options"] == {"ignore_lockout_failure_attempts": True}
    for _ in range(5):
        assert (await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))).status_code == 401
    assert (await api.post("/v3/auth/tokens", json=password_auth("demo", pw))).status_code == 201

    r = await api.patch(f"/v3/users/{demo_id}", headers=auth(admin_token),
                        json={"user": {"options": {"ignore_lockout_failure_attempts": None}}})
    assert r.status_code == 200 and r.json()["user"]["options"] == {}, r.text
    for _ in range(2):
        assert (await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))).status_code == 401
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"]


async def test_user_options_refuse_unknown_names_and_non_booleans_and_members(api, creds, admin_token,
                                                                              demo_token):
    """An option Nefos does not implement, or a value neither boolean nor null, is 400 with
    Keystone's error body and changes nothing; a member cannot exempt themself (403)."""
    demo_id = creds["demo"]["user_id"]
    for options in ({"lock_password": True}, {"ignore_lockout_failure_attempts": "yes"}, ["x"],
                    {"ignore_lockout_failure_attempts": True, "bogus": None}):
        r = await api.patch(f"/v3/users/{demo_id}", headers=auth(admin_token), json={"user": {"options": options}})
        assert_keystone_error(r, 400, "Bad Request")
        r = await api.post("/v3/users", headers=auth(admin_token),
                           json={"user": {"name": "opt-user", "options": options}})
        assert_keystone_error(r, 400, "Bad Request")
    r = await api.patch(f"/v3/users/{demo_id}", headers=auth(demo_token),
                        json={"user": {"options": {"ignore_lockout_failure_attempts": True}}})
    assert r.status_code == 403
    r = await api.get(f"/v3/users/{demo_id}", headers=auth(admin_token))
    assert r.json()["user"]["options"] == {}
    r = await api.get("/v3/users", headers=auth(admin_token), params={"name": "opt-user"})
    assert r.json()["users"] == []
    r = await api.post("/v3/users", headers=auth(admin_token), json={"user": {
        "name": "exempt", "password": "pw", "options": {"ignore_lockout_failure_attempts": True}}})
    assert r.status_code == 201 and r.json()["user"]["options"] == {"ignore_lockout_failure_attempts": True}


async def test_a_success_before_the_limit_resets_the_count(api, creds):
    pw = creds["demo"]["password"]
    for _ in range(2):
        for _ in range(5):
            assert (await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))).status_code == 401
        assert (await api.post("/v3/auth/tokens", json=password_auth("demo", pw))).status_code == 201


async def test_password_checks_do_not_block_the_event_loop(api, rt, creds, monkeypatch):
    """Several failed logins at once: every KDF run happens in a thread of the KDF pool, never on
    the event loop's thread (which would stall every other request for as long as it runs)."""
    from nefos.control.identity import passwords
    loop_thread = threading.get_ident()
    kdf_threads = []
    original = passwords.verify_password_sync

    def recording(password, stored):
        kdf_threads.append(threading.get_ident())
        return original(password, stored)

    monkeypatch.setattr(passwords, "verify_password_sync", recording)
    results = await asyncio.gather(*[
        api.post("/v3/auth/tokens", json=password_auth("demo", f"wrong-{i}")) for i in range(6)])
    assert [r.status_code for r in results] == [401] * 6
    assert len(kdf_threads) == 6 and loop_thread not in kdf_threads, kdf_threads


async def test_key_and_password_files_are_private(rt, creds):
    for name in ("fernet.key", "passwords.yaml"):
        mode = stat.S_IMODE(os.stat(rt.cfg.state_dir / name).st_mode)
        assert mode == 0o600, (name, oct(mode))
    stored = (rt.cfg.state_dir / "passwords.yaml").read_text()
    assert creds["admin"]["password"] in stored


@pytest.mark.parametrize("cfg_overrides", [{"lockout_failure_attempts": 2, "lockout_duration": 5,
                                            "password_hash_rounds": 10}])
async def test_a_lockout_ends_lockout_duration_after_the_last_counted_failure(api, creds, cfg_overrides):
    """Attempts refused while locked do not extend the lock: the right password gets in once
    lockout_duration has passed since the last failure that was evaluated."""
    pw = creds["demo"]["password"]
    for _ in range(2):
        assert (await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))).status_code == 401
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"]
    deadline = asyncio.get_running_loop().time() + 60
    while (r := await api.post("/v3/auth/tokens", json=password_auth("demo", pw))).status_code != 201:
        assert "locked" in r.json()["error"]["message"]
        assert asyncio.get_running_loop().time() < deadline, "still locked 60 s later"
        await asyncio.sleep(0.05)
    for _ in range(2):  # and the count starts again from zero
        assert (await api.post("/v3/auth/tokens", json=password_auth("demo", "wrong"))).status_code == 401
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"]


@pytest.mark.parametrize("cfg_overrides", [{"lockout_failure_attempts": 2, "lockout_duration": 60}])
async def test_wrong_original_passwords_on_a_password_change_count_towards_the_lockout(
        api, creds, demo_token, cfg_overrides):
    """POST /v3/users/{id}/password checks the original password as a sign-in does (Keystone's
    change_password authenticates): it is no way around the lockout to guess with."""
    demo_id, pw = creds["demo"]["user_id"], creds["demo"]["password"]
    for _ in range(2):
        r = await api.post(f"/v3/users/{demo_id}/password", headers=auth(demo_token),
                           json={"user": {"original_password": "wrong", "password": "new-pw"}})
        assert r.status_code == 401
    r = await api.post(f"/v3/users/{demo_id}/password", headers=auth(demo_token),
                       json={"user": {"original_password": pw, "password": "new-pw"}})
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"]
    r = await api.post("/v3/auth/tokens", json=password_auth("demo", pw))
    assert r.status_code == 401 and "locked" in r.json()["error"]["message"]
