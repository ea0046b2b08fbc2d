"""The Identity API's roles (``/v3/roles``); grants of them are in ``grants``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy import delete, select
from starlette.responses import JSONResponse, Response

from nefos import openapi
from nefos.db.models import IdentityRole, IdentityRoleAssignment
from nefos.control.identity import core, schemas
from nefos.clients.identity import tokens
from nefos.control.identity.core import bad_request, write
from nefos.control.identity.request_input import filter_query, valid_name, valid_text, where_filters
from nefos.control.identity.rest.documents import role_doc
from nefos.control.identity.rest.http import auth, authorize, body_of, list_links, runtime
from nefos.control.identity.rest.named_rows import check_name_free, rename, writing
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


_ROLE_FILTERS = {"name": IdentityRole.name}


@router.get("/v3/roles")
@openapi.documented(responses={200: schemas.many("roles", schemas.ROLE)},
                    query=filter_query(_ROLE_FILTERS, domain_id={"type": "string"}))
async def list_roles(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_roles")
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
    authorize(tok, "create_role")
    body = await body_of(request, "role")
    if body.get("domain_id"):
        raise bad_request("Domain-specific roles are not supported.")
    name = valid_name(body.get("name"), "role")
    row = IdentityRole(id=core.new_id(), name=name, description=valid_text(body.get("description"), "description"))
    async with writing(runtime(request), "role", name) as s:
        await check_name_free(s, IdentityRole, "role", name)
        s.add(row)
    return JSONResponse({"role": role_doc(request, row)}, status_code=201)


@router.get("/v3/roles/{role_id}")
@openapi.documented(responses={200: schemas.one("role", schemas.ROLE)})
async def show_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "get_role")
    async with runtime(request).db.reader() as s:
        row = await core.get_role(s, role_id)
    return {"role": role_doc(request, row)}


@router.patch("/v3/roles/{role_id}")
@openapi.documented(responses={200: schemas.one("role", schemas.ROLE)})
async def update_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "update_role")
    body = await body_of(request, "role")
    async with writing(runtime(request), "role", body.get("name")) as s:
        row = await core.get_role(s, role_id)
        if await rename(s, row, body, "role"):
            tokens.add_revocation_event(s, role_id=row.id)  # tokens carry role names
        if "description" in body:
            row.description = valid_text(body["description"], "description")
        await s.flush()
    return {"role": role_doc(request, row)}


@router.delete("/v3/roles/{role_id}", status_code=204)
async def delete_role(request: Request, role_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "delete_role")
    async with write(runtime(request)) as s:
        row = await core.get_role(s, role_id)
        await s.execute(delete(IdentityRoleAssignment).where(IdentityRoleAssignment.role_id == role_id))
        await s.delete(row)
        tokens.add_revocation_event(s, role_id=role_id)
    return Response(status_code=204)
