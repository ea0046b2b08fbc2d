"""The Identity API's domains (``/v3/domains``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi
from nefos.db.models import IdentityDomain, IdentityProject, IdentityRoleAssignment, IdentityUser
from nefos.control.identity import core, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import write
from nefos.control.identity.request_input import filter_query, valid_name, where_filters
from nefos.control.identity.rest.documents import domain_doc
from nefos.control.identity.rest.http import auth, authorize, body_of, list_links, runtime
from nefos.control.identity.rest.named_rows import (
    check_name_free, new_domain_or_project, update_domain_or_project, writing,
)
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


_DOMAIN_FILTERS = {"name": IdentityDomain.name, "enabled": IdentityDomain.enabled}


@router.get("/v3/domains")
@openapi.documented(responses={200: schemas.many("domains", schemas.DOMAIN)},
                    query=filter_query(_DOMAIN_FILTERS))
async def list_domains(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_domains")
    q = where_filters(select(IdentityDomain).order_by(IdentityDomain.name), request.query_params, _DOMAIN_FILTERS)
    async with runtime(request).db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
    return {"domains": [domain_doc(request, d) for d in rows], "links": list_links(request)}


@router.post("/v3/domains", status_code=201)
@openapi.documented(responses={201: schemas.one("domain", schemas.DOMAIN)})
async def create_domain(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "create_domain")
    body = await body_of(request, "domain")
    row = new_domain_or_project(IdentityDomain, body, valid_name(body.get("name"), "domain"))
    async with writing(runtime(request), "domain", row.name) as s:
        await check_name_free(s, IdentityDomain, "domain", row.name)
        s.add(row)
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
    authorize(tok, "update_domain")
    body = await body_of(request, "domain")
    async with writing(runtime(request), "domain", body.get("name")) as s:
        row = await core.get_domain(s, domain_id)
        await update_domain_or_project(s, row, body, "domain")
    return {"domain": domain_doc(request, row)}


@router.delete("/v3/domains/{domain_id}", status_code=204)
async def delete_domain(request: Request, domain_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "delete_domain")
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
