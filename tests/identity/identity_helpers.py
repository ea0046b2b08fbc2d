"""Helpers shared by the identity tests (imported as a plain module: tests/identity is on sys.path)."""

from __future__ import annotations

from nefos.cmd.allinone import free_port
from nefos.config import load_config


def make_config(tmp_path, **overrides):
    values = {"state_dir": tmp_path / "state", "auth_strategy": "keystone",
              "identity_api_port": free_port(), **overrides}
    return load_config(**values)


def password_auth(user: str, password: str, *, domain: dict | None = None, scope=None,
                  user_id: str | None = None) -> dict:
    user_ref = {"id": user_id} if user_id else {"name": user, "domain": domain or {"name": "Default"}}
    body = {"auth": {"identity": {"methods": ["password"],
                                  "password": {"user": {**user_ref, "password": password}}}}}
    if scope is not None:
        body["auth"]["scope"] = scope
    return body


def project_scope(name: str, domain: dict | None = None) -> dict:
    return {"project": {"name": name, "domain": domain or {"id": "default"}}}


async def get_token(api, user: str, password: str, project: str | None = None, **kw) -> str:
    scope = project_scope(project) if project else kw.pop("scope", None)
    r = await api.post("/v3/auth/tokens", json=password_auth(user, password, scope=scope, **kw))
    assert r.status_code == 201, r.text
    return r.headers["x-subject-token"]


def auth(token: str, **extra) -> dict:
    return {"X-Auth-Token": token, **extra}
