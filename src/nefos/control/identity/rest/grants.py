"""The Identity API's role grants (``/v3/{projects,domains}/{id}/users/{user}/roles/{role}``) and
``GET /v3/role_assignments``, with the helpers of ``nefos.control.identity.rest.http``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from starlette.responses import Response

from nefos import exceptions, openapi
from nefos.db.models import (
    IdentityDomain, IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser,
)
from nefos.control.identity import core, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import write
from nefos.control.identity.request_input import query_bool
from nefos.control.identity.rest.documents import role_doc
from nefos.control.identity.rest.http import allowed, auth, authorize, base_url, list_links, runtime
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


async def _grant_parts(s, target_type: str, target_id: str, user_id: str, role_id: str | None = None):
    if target_type == "project":
        await core.get_project(s, target_id)
    else:
        await core.get_domain(s, target_id)
    await core.get_user(s, user_id)
    if role_id is not None:
        await core.get_role(s, role_id)


def _grant_query(target_type: str, target_id: str, user_id: str, role_id: str):
    A = IdentityRoleAssignment
    return select(A).where(A.target_type == target_type, A.target_id == target_id,
                           A.actor_id == user_id, A.role_id == role_id)


async def _list_grants(request: Request, target_type: str, target_id: str, user_id: str, tok: TokenData):
    authorize(tok, "list_grants")
    async with runtime(request).db.reader() as s:
        await _grant_parts(s, target_type, target_id, user_id)
        rows = await core.direct_roles(s, user_id, target_type, target_id)
    return {"roles": [role_doc(request, r) for r in sorted(rows, key=lambda r: r.name)],
            "links": list_links(request)}


async def _put_grant(request: Request, target_type: str, target_id: str, user_id: str, role_id: str,
                     tok: TokenData):
    authorize(tok, "create_grant")
    try:
        async with write(runtime(request)) as s:
            await _grant_parts(s, target_type, target_id, user_id, role_id)
            if (await s.execute(_grant_query(target_type, target_id, user_id, role_id))).first() is None:
                s.add(IdentityRoleAssignment(actor_id=user_id, target_type=target_type,
                                             target_id=target_id, role_id=role_id))
    except IntegrityError:
        pass  # granted concurrently: the same outcome
    return Response(status_code=204)


async def _check_grant(request: Request, target_type: str, target_id: str, user_id: str, role_id: str,
                       tok: TokenData):
    authorize(tok, "check_grant", {"target.user.id": user_id})
    async with runtime(request).db.reader() as s:
        await _grant_parts(s, target_type, target_id, user_id, role_id)
        if (await s.execute(_grant_query(target_type, target_id, user_id, role_id))).first() is None:
            raise exceptions.NotFound(f"Could not find role assignment with role: {role_id}, "
                                      f"user: {user_id}, {target_type}: {target_id}.")
    return Response(status_code=204)


async def _delete_grant(request: Request, target_type: str, target_id: str, user_id: str, role_id: str,
                        tok: TokenData):
    authorize(tok, "revoke_grant")
    async with write(runtime(request)) as s:
        await _grant_parts(s, target_type, target_id, user_id, role_id)
        row = (await s.execute(_grant_query(target_type, target_id, user_id, role_id))).scalar_one_or_none()
        if row is None:
            raise exceptions.NotFound(f"Could not find role assignment with role: {role_id}, "
                                      f"user: {user_id}, {target_type}: {target_id}.")
        await s.delete(row)
        if target_type == "project":
            tokens.add_revocation_event(s, user_id=user_id, project_id=target_id)
        else:
            tokens.add_revocation_event(s, user_id=user_id, domain_id=target_id)
    return Response(status_code=204)


def _grant_routes(target_type: str, collection: str) -> None:
    base = f"/v3/{collection}/{{target_id}}/users/{{user_id}}/roles"

    @router.get(base)
    @openapi.documented(responses={200: schemas.many("roles", schemas.ROLE)})
    async def list_grants(request: Request, target_id: str, user_id: str, tok: TokenData = Depends(auth)):
        return await _list_grants(request, target_type, target_id, user_id, tok)

    @router.put(base + "/{role_id}", status_code=204)
    async def put_grant(request: Request, target_id: str, user_id: str, role_id: str,
                        tok: TokenData = Depends(auth)):
        return await _put_grant(request, target_type, target_id, user_id, role_id, tok)

    @router.api_route(base + "/{role_id}", methods=["GET", "HEAD"], status_code=204)
    async def check_grant(request: Request, target_id: str, user_id: str, role_id: str,
                          tok: TokenData = Depends(auth)):
        return await _check_grant(request, target_type, target_id, user_id, role_id, tok)

    @router.delete(base + "/{role_id}", status_code=204)
    async def delete_grant(request: Request, target_id: str, user_id: str, role_id: str,
                           tok: TokenData = Depends(auth)):
        return await _delete_grant(request, target_type, target_id, user_id, role_id, tok)


_grant_routes("project", "projects")
_grant_routes("domain", "domains")


# Keystone's filters of role assignments; a flag is on when given empty or true.
ROLE_ASSIGNMENT_QUERY = schemas.query(**{
    "user.id": {"type": "string"}, "scope.project.id": {"type": "string"},
    "scope.domain.id": {"type": "string"}, "role.id": {"type": "string"},
    "group.id": {"type": "string", "description": "No groups exist: nothing is listed."},
    "scope.system": {"type": "string", "description": "No system scope exists: nothing is listed."},
    "effective": {"type": "boolean"}, "include_names": {"type": "boolean"}})


@router.get("/v3/role_assignments")
@openapi.documented(responses={200: schemas.many("role_assignments", schemas.ROLE_ASSIGNMENT)},
                    query=ROLE_ASSIGNMENT_QUERY)
async def list_role_assignments(request: Request, tok: TokenData = Depends(auth)):
    params = request.query_params
    user_id = params.get("user.id")
    project_id = params.get("scope.project.id")
    domain_id = params.get("scope.domain.id")
    role_id = params.get("role.id")
    if not allowed(tok, "list_role_assignments:own", {"target.user.id": user_id, "target.project.id": project_id}):
        authorize(tok, "list_role_assignments")
    links = list_links(request)
    if "group.id" in params or "scope.system" in params or (project_id and domain_id):
        return {"role_assignments": [], "links": links}
    effective = "effective" in params and (params["effective"] == "" or query_bool(params["effective"]))
    include_names = "include_names" in params and (params["include_names"] == ""
                                                   or query_bool(params["include_names"]))
    A = IdentityRoleAssignment
    q = select(A).order_by(A.id)
    if user_id:
        q = q.where(A.actor_id == user_id)
    if project_id:
        q = q.where(A.target_type == "project", A.target_id == project_id)
    if domain_id:
        q = q.where(A.target_type == "domain", A.target_id == domain_id)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
        roles = {r.id: r for r in (await s.execute(select(IdentityRole))).scalars()}
        # (user, target_type, target_id, role, prior role or None)
        entries: list[tuple[str, str, str, IdentityRole, IdentityRole | None]] = []
        seen = set()
        for a in rows:
            role = roles.get(a.role_id)
            if role is None:
                continue
            key = (a.actor_id, a.target_type, a.target_id, role.id)
            if key not in seen:
                seen.add(key)
                entries.append((*key[:3], role, None))
        if effective:
            by_name = {r.name: r for r in roles.values()}
            for user, ttype, tid, role, _prior in list(entries):
                frontier = [role]
                while frontier:
                    prior = frontier.pop()
                    for implied_name in core.ROLE_IMPLIES.get(prior.name, ()):
                        implied = by_name.get(implied_name)
                        if implied is None or (user, ttype, tid, implied.id) in seen:
                            continue
                        seen.add((user, ttype, tid, implied.id))
                        entries.append((user, ttype, tid, implied, prior))
                        frontier.append(implied)
        if role_id:
            entries = [e for e in entries if e[3].id == role_id]
        names: dict[tuple[str, str], Any] = {}
        if include_names:
            for user, ttype, tid, _r, _p in entries:
                if ("user", user) not in names:
                    names[("user", user)] = await s.get(IdentityUser, user)
                kind = "project" if ttype == "project" else "domain"
                if (kind, tid) not in names:
                    names[(kind, tid)] = await (s.get(IdentityProject, tid) if kind == "project"
                                                else s.get(IdentityDomain, tid))
            for (kind, _id), obj in list(names.items()):
                if obj is not None and kind in ("user", "project") and ("domain", obj.domain_id) not in names:
                    names[("domain", obj.domain_id)] = await s.get(IdentityDomain, obj.domain_id)

    def dom(domain_id: str) -> dict:
        d = names.get(("domain", domain_id))
        return {"id": domain_id, "name": d.name if d else domain_id}

    out = []
    base = base_url(request)
    for user, ttype, tid, role, prior in entries:
        role_ref = {"id": role.id}
        user_ref: dict = {"id": user}
        target_ref: dict = {"id": tid}
        if include_names:
            role_ref["name"] = role.name
            u = names.get(("user", user))
            if u is not None:
                user_ref.update(name=u.name, domain=dom(u.domain_id))
            t = names.get((ttype, tid))
            if t is not None:
                target_ref["name"] = t.name
                if ttype == "project":
                    target_ref["domain"] = dom(t.domain_id)
        collection = "projects" if ttype == "project" else "domains"
        assigned = prior.id if prior is not None else role.id
        link = {"assignment": f"{base}/v3/{collection}/{tid}/users/{user}/roles/{assigned}"}
        if prior is not None:
            link["prior_role"] = f"{base}/v3/roles/{prior.id}"
        out.append({"role": role_ref, "user": user_ref, "scope": {ttype: target_ref}, "links": link})
    return {"role_assignments": out, "links": links}


