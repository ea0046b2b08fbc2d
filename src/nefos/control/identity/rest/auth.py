"""The Identity API's tokens (issue, validate, revoke: ``/v3/auth/tokens``) and what a token's
holder may see through it (``/v3/auth/{catalog,projects,domains}``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions, openapi
from nefos.clients.identity import catalog, tokens
from nefos.control.identity import core, schemas
from nefos.control.identity.core import bad_request, write
from nefos.control.identity.request_input import query_bool
from nefos.control.identity.rest.documents import domain_doc, project_doc
from nefos.control.identity.rest.http import allowed, auth, forbidden, list_links, runtime
from nefos.clients.identity.tokens import TokenData
from nefos.rest import json_body

router = APIRouter()


_NOCATALOG = {"nocatalog": {"type": "boolean"}}


@router.post("/v3/auth/tokens")
@openapi.documented(responses={201: schemas.TOKEN}, query=schemas.query(**_NOCATALOG))
async def issue_token(request: Request):
    rt = runtime(request)
    body = await json_body(request)
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
