"""The Identity API's catalog resources: services, endpoints and regions, read-only and derived
from configuration (``nefos.identity.catalog``), with the helpers of ``nefos.identity.rest``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from nefos import exceptions
from nefos.identity import catalog
from nefos.identity.rest import _list_links, _rt, _self_link, auth, require_admin
from nefos.identity.tokens import TokenData

router = APIRouter()


@router.get("/v3/services")
async def list_services(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_services")
    rows = catalog.services(_rt(request).cfg)
    if "type" in request.query_params:
        rows = [r for r in rows if r["type"] == request.query_params["type"]]
    return {"services": [{**r, "links": _self_link(request, f"services/{r['id']}")} for r in rows],
            "links": _list_links(request)}


@router.get("/v3/services/{service_id}")
async def show_service(request: Request, service_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "get_service")
    for r in catalog.services(_rt(request).cfg):
        if r["id"] == service_id:
            return {"service": {**r, "links": _self_link(request, f"services/{r['id']}")}}
    raise exceptions.NotFound(f"Could not find service: {service_id}.")


@router.get("/v3/endpoints")
async def list_endpoints(request: Request, tok: TokenData = Depends(auth)):
    require_admin(tok, "list_endpoints")
    rows = catalog.endpoints(_rt(request).cfg)
    for key in ("interface", "service_id", "region_id"):
        if key in request.query_params:
            rows = [r for r in rows if r[key] == request.query_params[key]]
    return {"endpoints": [{**r, "links": _self_link(request, f"endpoints/{r['id']}")} for r in rows],
            "links": _list_links(request)}


@router.get("/v3/endpoints/{endpoint_id}")
async def show_endpoint(request: Request, endpoint_id: str, tok: TokenData = Depends(auth)):
    require_admin(tok, "get_endpoint")
    for r in catalog.endpoints(_rt(request).cfg):
        if r["id"] == endpoint_id:
            return {"endpoint": {**r, "links": _self_link(request, f"endpoints/{r['id']}")}}
    raise exceptions.NotFound(f"Could not find endpoint: {endpoint_id}.")


def _region(request: Request) -> dict:
    name = _rt(request).cfg.region_name
    return {"id": name, "description": "", "parent_region_id": None,
            "links": _self_link(request, f"regions/{name}")}


@router.get("/v3/regions")
async def list_regions(request: Request, tok: TokenData = Depends(auth)):
    return {"regions": [_region(request)], "links": _list_links(request)}


@router.get("/v3/regions/{region_id}")
async def show_region(request: Request, region_id: str, tok: TokenData = Depends(auth)):
    if region_id != _rt(request).cfg.region_name:
        raise exceptions.NotFound(f"Could not find region: {region_id}.")
    return {"region": _region(request)}
