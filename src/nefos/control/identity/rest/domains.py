"""The Identity API's domains (``/v3/domains``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi
from nefos.db.models import IdentityDomain, IdentityProject, IdentityRoleAssignment, IdentityUser
from nefos.control.identity import core, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import write
from nefos.control.identity.request_input import filter_query, valid_bool, valid_name, valid_tags, valid_text, where_filters
from nefos.control.identity.rest.documents import domain_doc
from nefos.control.identity.rest.http import auth, authorize, body_of, conflict, list_links, require_admin, runtime
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


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
    body = await body_of(request, "domain")
    row = IdentityDomain(id=core.new_id(), name=valid_name(body.get("name"), "domain"),
                         description=valid_text(body.get("description"), "description"),
                         enabled=valid_bool(body.get("enabled", True), "enabled"), tags=valid_tags(body.get("tags")))
    try:
        async with write(runtime(request)) as s:
            if (await s.execute(select(IdentityDomain.id).where(IdentityDomain.name == row.name))).first():
                raise conflict("domain", "name", row.name)
            s.add(row)
    except IntegrityError:
        raise conflict("domain", "name", row.name)
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
    body = await body_of(request, "domain")
    try:
        async with write(runtime(request)) as s:
            row = await core.get_domain(s, domain_id)
            if "name" in body and body["name"] != row.name:
                name = valid_name(body["name"], "domain")
                if (await s.execute(select(IdentityDomain.id).where(IdentityDomain.name == name))).first():
                    raise conflict("domain", "name", name)
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
        raise conflict("domain", "name", str(body.get("name")))
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
