"""The Identity API: a Keystone v3 subset (tokens, catalog, domains, projects, users, roles; grants
and role assignments in ``nefos.control.identity.grants``, services, endpoints and regions in
``nefos.control.identity.catalog_resources``; reading request bodies and list filters in
``nefos.control.identity.request_input``; the helpers they share in ``nefos.control.identity.common``).

Every route except the version documents and ``POST /v3/auth/tokens`` needs a
valid ``X-Auth-Token`` (checked here whatever ``auth_strategy`` says: the
identity service is the authority). Writes need the admin role; a user may
read themselves, their projects and their own token.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi, rest
from nefos.db.models import (
    IdentityDomain, IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser,
)
from nefos.clients.identity import catalog, tokens
from nefos.control.identity import catalog_resources, core, grants, lockout, passwords, schemas
from nefos.control.identity.common import (
    allowed, auth, authorize, base_url, forbidden, list_links, require_admin, role_doc, runtime, self_link,
)
from nefos.control.identity.core import bad_request, write
from nefos.control.identity.request_input import (
    filter_query, matches_filters, query_bool, valid_bool, valid_name, valid_password, valid_tags, valid_text,
    where_filters,
)
from nefos.clients.identity.tokens import TokenData

VERSION_ID = "v3.14"
VERSION_UPDATED = "2020-04-07T00:00:00Z"
MEDIA_TYPES = [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]

_TITLES = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict", 413: "Request Entity Too Large",
    415: "Unsupported Media Type", 500: "Internal Server Error", 501: "Not Implemented",
    503: "Service Unavailable",
}


KEYSTONE_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message", "title"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "title": {"type": "string"}}}}}


def keystone_error_body(status: int, message: str, kind: str) -> dict:
    return {"error": {"code": status, "message": message, "title": _TITLES.get(status, "Error")}}


router = APIRouter()


# Helpers ---------------------------------------------------------------------

async def _body(request: Request, key: str) -> dict:
    body = await rest.json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get(key), dict):
        raise bad_request(f"Expecting to find {key} in request body.")
    return body[key]


def _conflict(kind: str, field: str, value: str) -> exceptions.Conflict:
    return exceptions.Conflict(
        f"Conflict occurred attempting to store {kind} - Duplicate entry found with {field} {value}.")


def _default_domain(tok: TokenData) -> str:
    return tok.domain_id or tok.project_domain_id or "default"


# Documents -------------------------------------------------------------------

def domain_doc(request: Request, d: IdentityDomain) -> dict:
    return {"id": d.id, "name": d.name, "description": d.description or "", "enabled": d.enabled,
            "tags": d.tags or [], "options": {}, "links": self_link(request, f"domains/{d.id}")}


def project_doc(request: Request, p: IdentityProject) -> dict:
    return {"id": p.id, "name": p.name, "domain_id": p.domain_id, "description": p.description or "",
            "enabled": p.enabled, "parent_id": p.parent_id or p.domain_id, "is_domain": False,
            "tags": p.tags or [], "options": {}, "links": self_link(request, f"projects/{p.id}")}


def user_doc(request: Request, u: IdentityUser) -> dict:
    doc = dict(u.extra or {})
    doc.update({"id": u.id, "name": u.name, "domain_id": u.domain_id, "enabled": u.enabled,
                "password_expires_at": None, "options": dict(u.options or {}),
                "links": self_link(request, f"users/{u.id}")})
    if u.default_project_id:
        doc["default_project_id"] = u.default_project_id
    if u.description:
        doc["description"] = u.description
    return doc


# Versions --------------------------------------------------------------------

def _version(request: Request) -> dict:
    return {"id": VERSION_ID, "status": "stable", "updated": VERSION_UPDATED,
            "links": [{"rel": "self", "href": f"{base_url(request)}/v3/"}], "media-types": MEDIA_TYPES}


@router.get("/")
@openapi.documented(responses={300: schemas.VERSIONS})
async def versions(request: Request):
    return JSONResponse({"versions": {"values": [_version(request)]}}, status_code=300)


@router.get("/v3")
@router.get("/v3/")
@openapi.documented(responses={200: schemas.VERSION})
async def version_v3(request: Request):
    return {"version": _version(request)}


# Tokens ----------------------------------------------------------------------

_NOCATALOG = {"nocatalog": {"type": "boolean"}}


@router.post("/v3/auth/tokens")
@openapi.documented(responses={201: schemas.TOKEN}, query=schemas.query(**_NOCATALOG))
async def issue_token(request: Request):
    rt = runtime(request)
    body = await rest.json_body(request)
    data = await core.authenticate(rt, body)
    token = tokens.issue(rt.cfg, data)
    doc = await core.token_body(rt, data, include_catalog=not query_bool(request.query_params.get("nocatalog")))
    return JSONResponse(doc, status_code=201, headers={"X-Subject-Token": token})


async def _subject(request: Request, tok: TokenData, action: str, allow_expired: bool = False) -> TokenData:
    subject = request.headers.get("x-subject-token")
    if not subject:
        raise bad_request("Expecting to find X-Subject-Token in the request headers.")
    privileged = allowed(tok, f"{action}:other_user")
    if allow_expired and not privileged:
        allow_expired = False
    try:
        data = await tokens.validate(runtime(request), subject, allow_expired=allow_expired)
    except exceptions.Unauthorized:
        raise exceptions.NotFound(f"Could not find token: {subject}.")
    if not privileged and data.user_id != tok.user_id:
        raise forbidden(action)
    return data


@router.api_route("/v3/auth/tokens", methods=["GET", "HEAD"])
@openapi.documented(responses={200: schemas.TOKEN},
                    query=schemas.query(**_NOCATALOG, allow_expired={"type": "boolean"}))
async def validate_token(request: Request, tok: TokenData = Depends(auth)):
    allow_expired = query_bool(request.query_params.get("allow_expired"))
    data = await _subject(request, tok, "validate_token", allow_expired)
    subject = request.headers["x-subject-token"]
    if request.method == "HEAD":
        return Response(status_code=200, headers={"X-Subject-Token": subject})
    doc = await core.token_body(runtime(request), data,
                                include_catalog=not query_bool(request.query_params.get("nocatalog")))
    return JSONResponse(doc, headers={"X-Subject-Token": subject})


@router.delete("/v3/auth/tokens", status_code=204)
async def revoke_token(request: Request, tok: TokenData = Depends(auth)):
    data = await _subject(request, tok, "revoke_token")
    async with write(runtime(request)) as s:
        tokens.add_revocation_event(s, audit_id=data.audit_ids[0])
    return Response(status_code=204)


@router.get("/v3/auth/catalog")
@openapi.documented(responses={200: schemas.catalog_answer})
async def auth_catalog(request: Request, tok: TokenData = Depends(auth)):
    if tok.scope == "unscoped":
        raise exceptions.NotAuthorized("A scoped token is required to get the service catalog.")
    return {"catalog": catalog.catalog(runtime(request).cfg), "links": list_links(request)}


@router.get("/v3/auth/projects")
@openapi.documented(responses={200: schemas.many("projects", schemas.PROJECT)})
async def auth_projects(request: Request, tok: TokenData = Depends(auth)):
    async with runtime(request).db.reader() as s:
        rows = await core.user_projects(s, tok.user_id)
    return {"projects": [project_doc(request, p) for p in rows if p.enabled], "links": list_links(request)}


@router.get("/v3/auth/domains")
@openapi.documented(responses={200: schemas.many("domains", schemas.DOMAIN)})
async def auth_domains(request: Request, tok: TokenData = Depends(auth)):
    async with runtime(request).db.reader() as s:
        rows = await core.user_domains(s, tok.user_id)
    return {"domains": [domain_doc(request, d) for d in rows if d.enabled], "links": list_links(request)}


# Domains ---------------------------------------------------------------------

_DOMAIN_FILTERS = {"name": IdentityDomain.name, "enabled": IdentityDomain.enabled}


@router.get("/v3/domains")
@openapi.documented(responses={200: schemas.many("domains", schemas.DOMAIN)},
                    query=filter_query(_DOMAIN_FILTERS))
async def list_domains(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_domains")
    q = where_filters(select(IdentityDomain).order_by(IdentityDomain.name), request.query_params, _DOMAIN_FILTERS)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
    return {"domains": [domain_doc(request, d) for d in rows], "links": list_links(request)}


@router.post("/v3/domains", status_code=201)
@openapi.documented(responses={201: schemas.one("domain", schemas.DOMAIN)})
async def create_domain(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "create_domain")
    body = await _body(request, "domain")
    row = IdentityDomain(id=core.new_id(), name=valid_name(body.get("name"), "domain"),
                         description=valid_text(body.get("description"), "description"),
                         enabled=valid_bool(body.get("enabled", True), "enabled"), tags=valid_tags(body.get("tags")))
    try:
        async with write(runtime(request)) as s:
            if (await s.execute(select(IdentityDomain.id).where(IdentityDomain.name == row.name))).first():
                raise _conflict("domain", "name", row.name)
            s.add(row)
    except IntegrityError:
        raise _conflict("domain", "name", row.name)
    return JSONResponse({"domain": domain_doc(request, row)}, status_code=201)


@router.get("/v3/domains/{domain_id}")
@openapi.documented(responses={200: schemas.one("domain", schemas.DOMAIN)})
async def show_domain(request: Request, domain_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "get_domain", {"target.domain.id": domain_id})
    async with runtime(request).db.reader() as s:
        row = await core.get_domain(s, domain_id)
    return {"domain": domain_doc(request, row)}


@router.patch("/v3/domains/{domain_id}")
@openapi.documented(responses={200: schemas.one("domain", schemas.DOMAIN)})
async def update_domain(request: Request, domain_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "update_domain")
    body = await _body(request, "domain")
    try:
        async with write(runtime(request)) as s:
            row = await core.get_domain(s, domain_id)
            if "name" in body and body["name"] != row.name:
                name = valid_name(body["name"], "domain")
                if (await s.execute(select(IdentityDomain.id).where(IdentityDomain.name == name))).first():
                    raise _conflict("domain", "name", name)
                row.name = name
            if "description" in body:
                row.description = valid_text(body["description"], "description")
            if "tags" in body:
                row.tags = valid_tags(body["tags"])
            if "enabled" in body:
                enabled = valid_bool(body["enabled"], "enabled")
                if row.enabled and not enabled:
                    tokens.add_revocation_event(s, domain_id=row.id)
                row.enabled = enabled
            await s.flush()
    except IntegrityError:
        raise _conflict("domain", "name", str(body.get("name")))
    return {"domain": domain_doc(request, row)}


@router.delete("/v3/domains/{domain_id}", status_code=204)
async def delete_domain(request: Request, domain_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "delete_domain")
    async with write(runtime(request)) as s:
        row = await core.get_domain(s, domain_id)
        if row.enabled:
            raise exceptions.NotAuthorized("Cannot delete a domain that is enabled, please disable it first.")
        projects = select(IdentityProject.id).where(IdentityProject.domain_id == domain_id)
        users = select(IdentityUser.id).where(IdentityUser.domain_id == domain_id)
        A = IdentityRoleAssignment
        await s.execute(delete(A).where(A.target_type == "project", A.target_id.in_(projects)))
        await s.execute(delete(A).where(A.target_type == "domain", A.target_id == domain_id))
        await s.execute(delete(A).where(A.actor_id.in_(users)))
        await s.execute(delete(IdentityProject).where(IdentityProject.domain_id == domain_id))
        await s.execute(delete(IdentityUser).where(IdentityUser.domain_id == domain_id))
        await s.delete(row)
        tokens.add_revocation_event(s, domain_id=domain_id)
    return Response(status_code=204)


# Projects --------------------------------------------------------------------

_PROJECT_FILTERS = {"name": IdentityProject.name, "domain_id": IdentityProject.domain_id,
                    "enabled": IdentityProject.enabled}


@router.get("/v3/projects")
@openapi.documented(responses={200: schemas.many("projects", schemas.PROJECT)},
                    query=filter_query(_PROJECT_FILTERS, parent_id={"type": "string"},
                                        is_domain={"type": "boolean"}))
async def list_projects(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_projects")
    P = IdentityProject
    params = request.query_params
    if query_bool(params.get("is_domain")):
        return {"projects": [], "links": list_links(request)}
    q = where_filters(select(P).order_by(P.name), params, _PROJECT_FILTERS)
    if "parent_id" in params:
        parent = params["parent_id"]
        async with runtime(request).db.reader() as s:
            is_domain = await s.get(IdentityDomain, parent) is not None
        q = q.where(P.parent_id.is_(None), P.domain_id == parent) if is_domain else q.where(P.parent_id == parent)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
    return {"projects": [project_doc(request, p) for p in rows], "links": list_links(request)}


@router.post("/v3/projects", status_code=201)
@openapi.documented(responses={201: schemas.one("project", schemas.PROJECT)})
async def create_project(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "create_project")
    body = await _body(request, "project")
    if body.get("is_domain"):
        raise bad_request("Projects acting as domains are not supported; create a domain instead.")
    name = valid_name(body.get("name"), "project")
    parent_id = body.get("parent_id")
    domain_id = body.get("domain_id")
    if domain_id is not None and not isinstance(domain_id, str):
        raise bad_request("Invalid input for field 'domain_id'.")
    if parent_id is not None and not isinstance(parent_id, str):
        raise bad_request("Invalid input for field 'parent_id'.")
    row = IdentityProject(id=core.new_id(), name=name,
                          description=valid_text(body.get("description"), "description"),
                          enabled=valid_bool(body.get("enabled", True), "enabled"), tags=valid_tags(body.get("tags")))
    try:
        async with write(runtime(request)) as s:
            if parent_id and await s.get(IdentityDomain, parent_id) is not None:
                domain_id = domain_id or parent_id  # a domain as parent: a top-level project
                parent_id = None
            if parent_id:
                parent = await s.get(IdentityProject, parent_id)
                if parent is None:
                    raise bad_request(f"Could not find parent project: {parent_id}.")
                if domain_id and domain_id != parent.domain_id:
                    raise bad_request("Cannot create a child project in a different domain than its parent.")
                domain_id = parent.domain_id
            domain_id = domain_id or _default_domain(tok)
            if await s.get(IdentityDomain, domain_id) is None:
                raise bad_request(f"Could not find domain: {domain_id}.")
            if (await s.execute(select(IdentityProject.id).where(
                    IdentityProject.domain_id == domain_id, IdentityProject.name == name))).first():
                raise _conflict("project", "name", name)
            row.domain_id, row.parent_id = domain_id, parent_id
            s.add(row)
    except IntegrityError:
        raise _conflict("project", "name", name)
    return JSONResponse({"project": project_doc(request, row)}, status_code=201)


@router.get("/v3/projects/{project_id}")
@openapi.documented(responses={200: schemas.one("project", schemas.PROJECT)})
async def show_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    async with runtime(request).db.reader() as s:
        if not allowed(tok, "get_project", {"target.project.id": project_id}):
            if not await core.direct_roles(s, tok.user_id, "project", project_id):
                raise forbidden("get_project")
        row = await core.get_project(s, project_id)
    return {"project": project_doc(request, row)}


@router.patch("/v3/projects/{project_id}")
@openapi.documented(responses={200: schemas.one("project", schemas.PROJECT)})
async def update_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "update_project")
    body = await _body(request, "project")
    try:
        async with write(runtime(request)) as s:
            row = await core.get_project(s, project_id)
            if "domain_id" in body and body["domain_id"] != row.domain_id:
                raise bad_request("Update of `domain_id` is not allowed.")
            if "parent_id" in body and body["parent_id"] not in (row.parent_id, row.domain_id):
                raise bad_request("Update of `parent_id` is not allowed.")
            if body.get("is_domain"):
                raise bad_request("Update of `is_domain` is not allowed.")
            if "name" in body and body["name"] != row.name:
                name = valid_name(body["name"], "project")
                if (await s.execute(select(IdentityProject.id).where(
                        IdentityProject.domain_id == row.domain_id, IdentityProject.name == name))).first():
                    raise _conflict("project", "name", name)
                row.name = name
            if "description" in body:
                row.description = valid_text(body["description"], "description")
            if "tags" in body:
                row.tags = valid_tags(body["tags"])
            if "enabled" in body:
                enabled = valid_bool(body["enabled"], "enabled")
                if row.enabled and not enabled:
                    tokens.add_revocation_event(s, project_id=row.id)
                row.enabled = enabled
            await s.flush()
    except IntegrityError:
        raise _conflict("project", "name", str(body.get("name")))
    return {"project": project_doc(request, row)}


@router.delete("/v3/projects/{project_id}", status_code=204)
async def delete_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "delete_project")
    async with write(runtime(request)) as s:
        row = await core.get_project(s, project_id)
        if (await s.execute(select(IdentityProject.id).where(IdentityProject.parent_id == project_id))).first():
            raise exceptions.NotAuthorized(
                f"Cannot delete the project {project_id} since it is not a leaf in the hierarchy.")
        A = IdentityRoleAssignment
        await s.execute(delete(A).where(A.target_type == "project", A.target_id == project_id))
        await s.delete(row)
        tokens.add_revocation_event(s, project_id=project_id)
    return Response(status_code=204)


# Users -----------------------------------------------------------------------

_USER_FIELDS = {"id", "name", "domain_id", "password", "enabled", "default_project_id", "description",
                "options", "federated", "links", "password_expires_at"}


_USER_FILTERS = {"name": IdentityUser.name, "domain_id": IdentityUser.domain_id,
                 "enabled": IdentityUser.enabled}


@router.get("/v3/users")
@openapi.documented(responses={200: schemas.many("users", schemas.USER)}, query=filter_query(_USER_FILTERS))
async def list_users(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_users")
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
    require_admin(tok, "create_user")
    rt = runtime(request)
    body = await _body(request, "user")
    name = valid_name(body.get("name"), "user")
    domain_id = body.get("domain_id") or _default_domain(tok)
    if not isinstance(domain_id, str):
        raise bad_request("Invalid input for field 'domain_id'.")
    password = valid_password(body.get("password"))
    row = IdentityUser(id=core.new_id(), name=name, enabled=valid_bool(body.get("enabled", True), "enabled"),
                       description=valid_text(body.get("description"), "description"), extra=_user_extra(body),
                       options=lockout.user_options(body.get("options", {})))
    # The KDF runs before the transaction, so no write lock is held while it works.
    row.password_hash = (await passwords.hash_password(password, rt.cfg.password_hash_rounds)
                         if password is not None else None)
    try:
        async with write(rt) as s:
            if await s.get(IdentityDomain, domain_id) is None:
                raise bad_request(f"Could not find domain: {domain_id}.")
            row.domain_id = domain_id
            row.default_project_id = await _check_default_project(s, body.get("default_project_id"))
            if (await s.execute(select(IdentityUser.id).where(
                    IdentityUser.domain_id == domain_id, IdentityUser.name == name))).first():
                raise _conflict("user", "name", name)
            s.add(row)
    except IntegrityError:
        raise _conflict("user", "name", name)
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
    require_admin(tok, "update_user")
    rt = runtime(request)
    body = await _body(request, "user")
    new_hash = None
    if "password" in body:
        password = valid_password(body["password"])
        new_hash = (await passwords.hash_password(password, rt.cfg.password_hash_rounds)
                    if password is not None else "")
    try:
        async with write(rt) as s:
            row = await core.get_user(s, user_id)
            if "domain_id" in body and body["domain_id"] != row.domain_id:
                raise bad_request("Update of `domain_id` is not allowed.")
            if "name" in body and body["name"] != row.name:
                name = valid_name(body["name"], "user")
                if (await s.execute(select(IdentityUser.id).where(
                        IdentityUser.domain_id == row.domain_id, IdentityUser.name == name))).first():
                    raise _conflict("user", "name", name)
                row.name = name
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
    except IntegrityError:
        raise _conflict("user", "name", str(body.get("name")))
    return {"user": user_doc(request, row)}


@router.delete("/v3/users/{user_id}", status_code=204)
async def delete_user(request: Request, user_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "delete_user")
    async with write(runtime(request)) as s:
        row = await core.get_user(s, user_id)
        await s.execute(delete(IdentityRoleAssignment).where(IdentityRoleAssignment.actor_id == user_id))
        await s.delete(row)
        tokens.add_revocation_event(s, user_id=user_id)
    return Response(status_code=204)


_USER_PROJECT_FILTERS = {name: _PROJECT_FILTERS[name] for name in ("name", "domain_id", "enabled")}


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
    body = await _body(request, "user")
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


# Roles -----------------------------------------------------------------------

_ROLE_FILTERS = {"name": IdentityRole.name}


@router.get("/v3/roles")
@openapi.documented(responses={200: schemas.many("roles", schemas.ROLE)},
                    query=filter_query(_ROLE_FILTERS, domain_id={"type": "string"}))
async def list_roles(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_roles")
    params = request.query_params
    if params.get("domain_id"):
        return {"roles": [], "links": list_links(request)}  # no domain-specific roles
    q = where_filters(select(IdentityRole).order_by(IdentityRole.name), params, _ROLE_FILTERS)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
    return {"roles": [role_doc(request, r) for r in rows], "links": list_links(request)}


@router.post("/v3/roles", status_code=201)
@openapi.documented(responses={201: schemas.one("role", schemas.ROLE)})
async def create_role(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "create_role")
    body = await _body(request, "role")
    if body.get("domain_id"):
        raise bad_request("Domain-specific roles are not supported.")
    name = valid_name(body.get("name"), "role")
    row = IdentityRole(id=core.new_id(), name=name, description=valid_text(body.get("description"), "description"))
    try:
        async with write(runtime(request)) as s:
            if (await s.execute(select(IdentityRole.id).where(IdentityRole.name == name))).first():
                raise _conflict("role", "name", name)
            s.add(row)
    except IntegrityError:
        raise _conflict("role", "name", name)
    return JSONResponse({"role": role_doc(request, row)}, status_code=201)


@router.get("/v3/roles/{role_id}")
@openapi.documented(responses={200: schemas.one("role", schemas.ROLE)})
async def show_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "get_role")
    async with runtime(request).db.reader() as s:
        row = await core.get_role(s, role_id)
    return {"role": role_doc(request, row)}


@router.patch("/v3/roles/{role_id}")
@openapi.documented(responses={200: schemas.one("role", schemas.ROLE)})
async def update_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "update_role")
    body = await _body(request, "role")
    try:
        async with write(runtime(request)) as s:
            row = await core.get_role(s, role_id)
            if "name" in body and body["name"] != row.name:
                name = valid_name(body["name"], "role")
                if (await s.execute(select(IdentityRole.id).where(IdentityRole.name == name))).first():
                    raise _conflict("role", "name", name)
                row.name = name
                tokens.add_revocation_event(s, role_id=row.id)  # tokens carry role names
            if "description" in body:
                row.description = valid_text(body["description"], "description")
            await s.flush()
    except IntegrityError:
        raise _conflict("role", "name", str(body.get("name")))
    return {"role": role_doc(request, row)}


@router.delete("/v3/roles/{role_id}", status_code=204)
async def delete_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "delete_role")
    async with write(runtime(request)) as s:
        row = await core.get_role(s, role_id)
        await s.execute(delete(IdentityRoleAssignment).where(IdentityRoleAssignment.role_id == role_id))
        await s.delete(row)
        tokens.add_revocation_event(s, role_id=role_id)
    return Response(status_code=204)


@router.get("/v3/groups")
@openapi.documented(responses={200: schemas.many("groups", schemas.GROUP)})
async def list_groups(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_groups")
    return {"groups": [], "links": list_links(request)}  # groups are not supported: there are none


# The app ---------------------------------------------------------------------

def create_app(rt):
    """The Identity API over ``rt`` (config, database)."""
    app = rest.make_app("Nefos Identity API", "identity", keystone_error_body)
    app.state.rt = rt

    @app.exception_handler(exceptions.Unauthorized)
    async def _unauthorized(request: Request, exc: exceptions.Unauthorized):
        return JSONResponse(keystone_error_body(401, str(exc), type(exc).__name__), status_code=401,
                            headers={"WWW-Authenticate": catalog.www_authenticate(rt.cfg)})

    app.include_router(router)
    app.include_router(grants.router)
    app.include_router(catalog_resources.router)
    openapi.serve(app, "/v3/openapi.json", title="Nefos Identity API", version="3.14",
                  error_schema=KEYSTONE_ERROR_SCHEMA)
    return app
