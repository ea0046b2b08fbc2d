"""Token authentication in every API (nefos.rest): another app validates tokens locally."""

from __future__ import annotations

import httpx
import pytest
from fastapi import Request
from identity_helpers import auth

from nefos import rest


def nova_like_error_body(status: int, message: str, kind: str) -> dict:
    return {"someFault": {"code": status, "message": message}}


def other_api(rt):
    app = rest.make_app("other", "test", nova_like_error_body)
    app.state.rt = rt

    @app.get("/")
    async def root():
        return {"versions": []}

    @app.get("/v2.1/whoami")
    async def whoami(request: Request):
        ctx = rest.get_context(request)
        return {"user": ctx.user_id, "project": ctx.project_id, "roles": ctx.roles, "admin": ctx.is_admin}

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://other.test")


async def test_keystone_strategy_requires_a_token(rt, creds, demo_token, admin_token):
    async with other_api(rt) as c:
        r = await c.get("/v2.1/whoami")
        assert r.status_code == 401
        assert r.json() == {"someFault": {"code": 401, "message": "The request you have made requires authentication."}}
        assert r.headers["www-authenticate"] == f'Keystone uri="http://127.0.0.1:{rt.cfg.identity_api_port}"'
        assert r.headers["x-openstack-request-id"].startswith("req-")
        r = await c.get("/v2.1/whoami", headers=auth("garbage"))
        assert r.status_code == 401 and "someFault" in r.json()
        # Headers that noauth trusts are ignored.
        r = await c.get("/v2.1/whoami", headers={"X-Project-Id": "p", "X-Roles": "admin"})
        assert r.status_code == 401
        # Version documents stay public.
        assert (await c.get("/")).status_code == 200

        r = await c.get("/v2.1/whoami", headers=auth(demo_token))
        assert r.status_code == 200
        assert r.json() == {"user": creds["demo"]["user_id"], "project": creds["demo"]["project_id"],
                            "roles": ["member", "reader"], "admin": False}
        r = await c.get("/v2.1/whoami", headers=auth(admin_token))
        assert r.json()["admin"] is True


@pytest.mark.parametrize("cfg_overrides", [{"auth_strategy": "noauth"}])
async def test_noauth_strategy_keeps_header_behaviour(rt, creds, demo_token, cfg_overrides):
    async with other_api(rt) as c:
        # Nobody is anybody by default: no identity headers, no access (Nova's noauth2).
        r = await c.get("/v2.1/whoami")
        assert r.status_code == 401
        r = await c.get("/v2.1/whoami", headers={"X-Project-Id": "p1", "X-Roles": "admin"})
        assert r.status_code == 200 and r.json()["admin"] is True
        r = await c.get("/v2.1/whoami", headers={"X-Project-Id": "p1", "X-User-Id": "u1", "X-Roles": "member"})
        assert r.json() == {"user": "u1", "project": "p1", "roles": ["member"], "admin": False}
        # A valid token still says who the caller is.
        r = await c.get("/v2.1/whoami", headers=auth(demo_token))
        assert r.json()["user"] == creds["demo"]["user_id"]


async def test_revocation_reaches_other_apis(rt, api, demo_token, admin_token):
    async with other_api(rt) as c:
        assert (await c.get("/v2.1/whoami", headers=auth(demo_token))).status_code == 200
        r = await api.delete("/v3/auth/tokens", headers=auth(admin_token, **{"X-Subject-Token": demo_token}))
        assert r.status_code == 204
        assert (await c.get("/v2.1/whoami", headers=auth(demo_token))).status_code == 401
