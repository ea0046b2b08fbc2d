"""The Identity API's version documents (``GET /`` and ``GET /v3``), the only routes besides
``POST /v3/auth/tokens`` that need no token."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from nefos import openapi
from nefos.control.identity import schemas
from nefos.control.identity.rest.http import base_url

VERSION_ID = "v3.14"
VERSION_UPDATED = "2020-04-07T00:00:00Z"
MEDIA_TYPES = [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]

router = APIRouter()


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
