"""The Identity API's catalog resources: services, endpoints and regions, read-only and derived
from configuration (``nefos.clients.identity.catalog``), with the helpers of ``nefos.control.identity.rest.http``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from nefos import exceptions, openapi
from nefos.clients.identity import catalog
from nefos.control.identity import schemas
from nefos.control.identity.rest.http import auth, authorize, list_links, runtime, self_link
from nefos.clients.identity.tokens import TokenData

router = APIRouter()


def _linked(request: Request, row: dict, collection: str) -> dict:
    return {**row, "links": self_link(request, f"{collection}/{row['id']}")}


def _one(request: Request, rows: list[dict], kind: str, collection: str, item_id: str) -> dict:
    """``{kind: row}`` for the row with id ``item_id``; Keystone's 404 when there is none."""
    for row in rows:
        if row["id"] == item_id:
            return {kind: _linked(request, row, collection)}
    raise exceptions.NotFound(f"Could not find {kind}: {item_id}.")


def _filtered(request: Request, rows: list[dict], filters: tuple[str, ...]) -> list[dict]:
    """The rows equal to every filter of ``filters`` the request gives."""
    for key in filters:
        if key in request.query_params:
            rows = [r for r in rows if r[key] == request.query_params[key]]
    return rows


def _query(filters: tuple[str, ...]) -> dict:
    return schemas.query(**{key: {"type": "string"} for key in filters})


_SERVICE_FILTERS = ("type",)
_ENDPOINT_FILTERS = ("interface", "service_id", "region_id")


@router.get("/v3/services")
@openapi.documented(responses={200: schemas.many("services", schemas.SERVICE)},
                    query=_query(_SERVICE_FILTERS))
async def list_services(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_services")
    rows = _filtered(request, catalog.services(runtime(request).cfg), _SERVICE_FILTERS)
    return {"services": [_linked(request, r, "services") for r in rows],
            "links": list_links(request)}


@router.get("/v3/services/{service_id}")
@openapi.documented(responses={200: schemas.one("service", schemas.SERVICE)})
async def show_service(request: Request, service_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "get_service")
    return _one(request, catalog.services(runtime(request).cfg), "service", "services", service_id)


@router.get("/v3/endpoints")
@openapi.documented(responses={200: schemas.many("endpoints", schemas.ENDPOINT)},
                    query=_query(_ENDPOINT_FILTERS))
async def list_endpoints(request: Request, tok: TokenData = Depends(auth)):
    authorize(tok, "list_endpoints")
    rows = _filtered(request, catalog.endpoints(runtime(request).cfg), _ENDPOINT_FILTERS)
    return {"endpoints": [_linked(request, r, "endpoints") for r in rows],
            "links": list_links(request)}


@router.get("/v3/endpoints/{endpoint_id}")
@openapi.documented(responses={200: schemas.one("endpoint", schemas.ENDPOINT)})
async def show_endpoint(request: Request, endpoint_id: str, tok: TokenData = Depends(auth)):
    authorize(tok, "get_endpoint")
    return _one(request, catalog.endpoints(runtime(request).cfg), "endpoint", "endpoints", endpoint_id)


def _region(request: Request) -> dict:
    name = runtime(request).cfg.region_name
    return {"id": name, "description": "", "parent_region_id": None,
            "links": self_link(request, f"regions/{name}")}


@router.get("/v3/regions")
@openapi.documented(responses={200: schemas.many("regions", schemas.REGION)})
async def list_regions(request: Request, tok: TokenData = Depends(auth)):
    return {"regions": [_region(request)], "links": list_links(request)}


@router.get("/v3/regions/{region_id}")
@openapi.documented(responses={200: schemas.one("region", schemas.REGION)})
async def show_region(request: Request, region_id: str, tok: TokenData = Depends(auth)):
    if region_id != runtime(request).cfg.region_name:
        raise exceptions.NotFound(f"Could not find region: {region_id}.")
    return {"region": _region(request)}
