"""The Identity API's projects (``/v3/projects``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi
from nefos.db.models import IdentityDomain, IdentityProject, IdentityRoleAssignment
from nefos.control.identity import core, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import bad_request, write
from nefos.control.identity.request_input import (
    filter_query, query_bool, valid_name, where_filters,
)
from nefos.control.identity.rest.documents import project_doc
from nefos.control.identity.rest.http import (
    allowed, auth, authorize, body_of, default_domain, list_links, runtime,
)
from nefos.control.identity.rest.named_rows import (
    check_name_free, new_domain_or_project, update_domain_or_project, writing,
)
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


PROJECT_FILTERS = {"name": IdentityProject.name, "domain_id": IdentityProject.domain_id,
                    "enabled": IdentityProject.enabled}


@router.get("/v3/projects")
@openapi.documented(responses={200: schemas.many("projects", schemas.PROJECT)},
                    query=filter_query(PROJECT_FILTERS, parent_id={"type": "string"},
                                        is_domain={"type": "boolean"}))
async def list_projects(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_projects")
    P = IdentityProject
    params = request.query_params
    if query_bool(params.get("is_domain")):
        return {"projects": [], "links": list_links(request)}
    q = where_filters(select(P).order_by(P.name), params, PROJECT_FILTERS)
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
    authorize(tok, "create_project")
    body = await body_of(request, "project")
    if body.get("is_domain"):
        raise bad_request("Projects acting as domains are not supported; create a domain instead.")
    name = valid_name(body.get("name"), "project")
    parent_id = body.get("parent_id")
    domain_id = body.get("domain_id")
    if domain_id is not None and not isinstance(domain_id, str):
        raise bad_request("Invalid input for field 'domain_id'.")
    if parent_id is not None and not isinstance(parent_id, str):
        raise bad_request("Invalid input for field 'parent_id'.")
    row = new_domain_or_project(IdentityProject, body, name)
    async with writing(runtime(request), "project", name) as s:
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
        domain_id = domain_id or default_domain(tok)
        if await s.get(IdentityDomain, domain_id) is None:
            raise bad_request(f"Could not find domain: {domain_id}.")
        await check_name_free(s, IdentityProject, "project", name, domain_id=domain_id)
        row.domain_id, row.parent_id = domain_id, parent_id
        s.add(row)
    return JSONResponse({"project": project_doc(request, row)}, status_code=201)


@router.get("/v3/projects/{project_id}")
@openapi.documented(responses={200: schemas.one("project", schemas.PROJECT)})
async def show_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    async with runtime(request).db.reader() as s:
        if not allowed(tok, "get_project", {"target.project.id": project_id}) \
                and not await core.direct_roles(s, tok.user_id, "project", project_id):
            authorize(tok, "get_project", {"target.project.id": project_id})  # refused, in Keystone's words
        row = await core.get_project(s, project_id)
    return {"project": project_doc(request, row)}


@router.patch("/v3/projects/{project_id}")
@openapi.documented(responses={200: schemas.one("project", schemas.PROJECT)})
async def update_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "update_project")
    body = await body_of(request, "project")
    async with writing(runtime(request), "project", body.get("name")) as s:
        row = await core.get_project(s, project_id)
        if "domain_id" in body and body["domain_id"] != row.domain_id:
            raise bad_request("Update of `domain_id` is not allowed.")
        if "parent_id" in body and body["parent_id"] not in (row.parent_id, row.domain_id):
            raise bad_request("Update of `parent_id` is not allowed.")
        if body.get("is_domain"):
            raise bad_request("Update of `is_domain` is not allowed.")
        await update_domain_or_project(s, row, body, "project", domain_id=row.domain_id)
    return {"project": project_doc(request, row)}


@router.delete("/v3/projects/{project_id}", status_code=204)
async def delete_project(request: Request, project_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "delete_project")
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
