"""The Identity API's users (``/v3/users``): their projects and their own password change too."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from starlette.responses import JSONResponse, Response

from nefos import openapi
from nefos.db.models import IdentityDomain, IdentityProject, IdentityRoleAssignment, IdentityUser
from nefos.control.identity import core, lockout, passwords, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import bad_request, write
from nefos.control.identity.request_input import (
    filter_query, matches_filters, valid_bool, valid_name, valid_password, valid_text, where_filters,
)
from nefos.control.identity.rest.documents import project_doc, user_doc
from nefos.control.identity.rest.http import (
    auth, authorize, body_of, default_domain, list_links, runtime,
)
from nefos.control.identity.rest.named_rows import check_name_free, rename, writing
from nefos.control.identity.rest.projects import PROJECT_FILTERS
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


_USER_FIELDS = {"id", "name", "domain_id", "password", "enabled", "default_project_id", "description",
                "options", "federated", "links", "password_expires_at"}


_USER_FILTERS = {"name": IdentityUser.name, "domain_id": IdentityUser.domain_id,
                 "enabled": IdentityUser.enabled}


@router.get("/v3/users")
@openapi.documented(responses={200: schemas.many("users", schemas.USER)}, query=filter_query(_USER_FILTERS))
async def list_users(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_users")
    q = where_filters(select(IdentityUser).order_by(IdentityUser.name), request.query_params, _USER_FILTERS)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
    return {"users": [user_doc(request, u) for u in rows], "links": list_links(request)}


def _user_extra(body: dict, current: dict | None = None) -> dict:
    extra = dict(current or {})
    for key, value in body.items():
        if key not in _USER_FIELDS:
            extra[key] = value
    return extra


async def _check_default_project(s, project_id: Any) -> str | None:
    if project_id is None:
        return None
    if not isinstance(project_id, str) or await s.get(IdentityProject, project_id) is None:
        raise bad_request(f"Could not find project: {project_id}.")
    return project_id


@router.post("/v3/users", status_code=201)
@openapi.documented(responses={201: schemas.one("user", schemas.USER)})
async def create_user(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "create_user")
    rt = runtime(request)
    body = await body_of(request, "user")
    name = valid_name(body.get("name"), "user")
    domain_id = body.get("domain_id") or default_domain(tok)
    if not isinstance(domain_id, str):
        raise bad_request("Invalid input for field 'domain_id'.")
    password = valid_password(body.get("password"))
    row = IdentityUser(id=core.new_id(), name=name, enabled=valid_bool(body.get("enabled", True), "enabled"),
                       description=valid_text(body.get("description"), "description"), extra=_user_extra(body),
                       options=lockout.user_options(body.get("options", {})))
    # The KDF runs before the transaction, so no write lock is held while it works.
    row.password_hash = (await passwords.hash_password(password, rt.cfg.password_hash_rounds)
                         if password is not None else None)
    async with writing(rt, "user", name) as s:
        if await s.get(IdentityDomain, domain_id) is None:
            raise bad_request(f"Could not find domain: {domain_id}.")
        row.domain_id = domain_id
        row.default_project_id = await _check_default_project(s, body.get("default_project_id"))
        await check_name_free(s, IdentityUser, "user", name, domain_id=domain_id)
        s.add(row)
    return JSONResponse({"user": user_doc(request, row)}, status_code=201)


@router.get("/v3/users/{user_id}")
@openapi.documented(responses={200: schemas.one("user", schemas.USER)})
async def show_user(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "get_user", {"target.user.id": user_id})
    async with runtime(request).db.reader() as s:
        row = await core.get_user(s, user_id)
    return {"user": user_doc(request, row)}


@router.patch("/v3/users/{user_id}")
@openapi.documented(responses={200: schemas.one("user", schemas.USER)})
async def update_user(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "update_user")
    rt = runtime(request)
    body = await body_of(request, "user")
    new_hash = None
    if "password" in body:
        password = valid_password(body["password"])
        new_hash = (await passwords.hash_password(password, rt.cfg.password_hash_rounds)
                    if password is not None else "")
    async with writing(rt, "user", body.get("name")) as s:
        row = await core.get_user(s, user_id)
        if "domain_id" in body and body["domain_id"] != row.domain_id:
            raise bad_request("Update of `domain_id` is not allowed.")
        await rename(s, row, body, "user", domain_id=row.domain_id)
        if "description" in body:
            row.description = valid_text(body["description"], "description")
        if "default_project_id" in body:
            row.default_project_id = await _check_default_project(s, body["default_project_id"])
        revoke = False
        if "enabled" in body:
            enabled = valid_bool(body["enabled"], "enabled")
            revoke = row.enabled and not enabled
            row.enabled = enabled
        if "options" in body:
            row.options = lockout.user_options(body["options"], row.options)
        if new_hash is not None:
            row.password_hash = new_hash or None
            lockout.forget_failures(row)
            revoke = True
        row.extra = _user_extra(body, row.extra)
        if revoke:
            tokens.add_revocation_event(s, user_id=row.id)
        await s.flush()
    return {"user": user_doc(request, row)}


@router.delete("/v3/users/{user_id}", status_code=204)
async def delete_user(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "delete_user")
    async with write(runtime(request)) as s:
        row = await core.get_user(s, user_id)
        await s.execute(delete(IdentityRoleAssignment).where(IdentityRoleAssignment.actor_id == user_id))
        await s.delete(row)
        tokens.add_revocation_event(s, user_id=user_id)
    return Response(status_code=204)


_USER_PROJECT_FILTERS = {name: PROJECT_FILTERS[name] for name in ("name", "domain_id", "enabled")}


@router.get("/v3/users/{user_id}/projects")
@openapi.documented(responses={200: schemas.many("projects", schemas.PROJECT)},
                    query=filter_query(_USER_PROJECT_FILTERS))
async def list_user_projects(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "list_user_projects", {"target.user.id": user_id})
    async with runtime(request).db.reader() as s:
        await core.get_user(s, user_id)
        rows = await core.user_projects(s, user_id)
    rows = [p for p in rows if matches_filters(p, request.query_params, _USER_PROJECT_FILTERS)]
    return {"projects": [project_doc(request, p) for p in rows], "links": list_links(request)}


@router.post("/v3/users/{user_id}/password", status_code=204)
async def change_password(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "change_password", {"target.user.id": user_id})
    rt = runtime(request)
    body = await body_of(request, "user")
    original, password = body.get("original_password"), body.get("password")
    if not isinstance(original, str) or not isinstance(password, str) or not password:
        raise bad_request("Expecting to find original_password and password in user.")
    async with rt.db.reader() as s:
        row = await core.get_user(s, user_id)
    await core.check_password(rt, row, original)
    new_hash = await passwords.hash_password(password, rt.cfg.password_hash_rounds)
    async with write(rt) as s:
        row = await core.get_user(s, user_id)
        row.password_hash = new_hash
        tokens.add_revocation_event(s, user_id=user_id)
    return Response(status_code=204)
