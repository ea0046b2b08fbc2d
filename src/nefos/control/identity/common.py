"""Helpers the Identity API resources share: the runtime, links, the caller's token and Keystone's
policy checks on it, the role document."""

from __future__ import annotations

from fastapi import Request

from nefos import exceptions, policy
from nefos.db.models import IdentityRole
from nefos.clients.identity import tokens
from nefos.clients.identity.tokens import TokenData


def runtime(request: Request):
    return request.app.state.rt


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def self_link(request: Request, path: str) -> dict:
    return {"self": f"{base_url(request)}/v3/{path}"}


def list_links(request: Request) -> dict:
    return {"self": str(request.url), "previous": None, "next": None}


def forbidden(action: str) -> exceptions.NotAuthorized:
    return exceptions.NotAuthorized(
        f"You are not authorized to perform the requested action: identity:{action}.")


def credentials(tok: TokenData) -> dict:
    """What Keystone's policy rules test about a token (``policy.credentials`` for the identity API)."""
    names = [n.lower() for n in tok.role_names]
    return {"roles": names, "user_id": tok.user_id, "project_id": tok.project_id,
            "domain_id": tok.domain_id, "is_admin": "admin" in names,
            "token": {"user": {"domain": {"id": tok.user_domain_id}},
                      "project": {"domain": {"id": tok.project_domain_id}},
                      "domain": {"id": tok.domain_id}}}


def allowed(tok: TokenData, action: str, target: dict | None = None) -> bool:
    return policy.check(credentials(tok), f"identity:{action}", target)


def authorize(tok: TokenData, action: str, target: dict | None = None) -> None:
    """403 in Keystone's words unless policy ``identity:<action>`` passes for ``tok`` on ``target``."""
    policy.enforce(credentials(tok), f"identity:{action}", target, api="identity")


def require_admin(tok: TokenData, action: str) -> None:
    authorize(tok, action)


async def auth(request: Request) -> TokenData:
    """The caller's validated token (401 when missing or invalid)."""
    token = request.headers.get("x-auth-token")
    if not token:
        raise exceptions.Unauthorized("The request you have made requires authentication.")
    return await tokens.validate(runtime(request), token)


def role_doc(request: Request, r: IdentityRole) -> dict:
    return {"id": r.id, "name": r.name, "domain_id": None, "description": r.description or "",
            "options": {}, "links": self_link(request, f"roles/{r.id}")}
