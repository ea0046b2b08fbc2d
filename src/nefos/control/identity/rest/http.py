"""The HTTP helpers every Identity API router shares: the runtime, links, the caller's token and
Keystone's policy checks on it, the body of a request and Keystone's answer to a duplicate."""

from __future__ import annotations

from fastapi import Request

from nefos import exceptions, policy
from nefos.clients.identity import tokens
from nefos.control.identity.core import bad_request
from nefos.clients.identity.tokens import TokenData
from nefos.rest import json_body


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


async def auth(request: Request) -> TokenData:
    """The caller's validated token (401 when missing or invalid)."""
    token = request.headers.get("x-auth-token")
    if not token:
        raise exceptions.Unauthorized("The request you have made requires authentication.")
    return await tokens.validate(runtime(request), token)


async def body_of(request: Request, key: str) -> dict:
    """The object under ``key`` of the request's JSON body; Keystone's 400 when there is none."""
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get(key), dict):
        raise bad_request(f"Expecting to find {key} in request body.")
    return body[key]


def conflict(kind: str, field: str, value: str) -> exceptions.Conflict:
    return exceptions.Conflict(
        f"Conflict occurred attempting to store {kind} - Duplicate entry found with {field} {value}.")


def default_domain(tok: TokenData) -> str:
    """The domain a new user or project goes to when the request names none: the caller's."""
    return tok.domain_id or tok.project_domain_id or "default"
