"""Version documents: ``/`` (every version), ``/v2`` and ``/v2.1``.

As Nova, ``/`` lists the legacy ``v2.0`` (deprecated, no microversions; its
document lives at ``/v2/``) first, then ``v2.1`` (sorted by id).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented

router = APIRouter()

_DOCS = "https://docs.openstack.org/"
# Nova's VERSIONS table: id -> (status, version, min_version, updated, media type version, path).
_VERSIONS = {
    "v2.0": ("DEPRECATED", "", "", "2025-07-04T12:00:00Z", "2", "v2"),
    "v2.1": ("CURRENT", microversion.MAX_VERSION, microversion.MIN_VERSION, "2013-07-23T11:33:21Z", "2.1",
             "v2.1"),
}


def _version_doc(request: Request, ident: str) -> dict:
    status, version, min_version, updated, media, path = _VERSIONS[ident]
    base = str(request.base_url).rstrip("/")
    return {
        "id": ident,
        "status": status,
        "version": version,
        "min_version": min_version,
        "updated": updated,
        "links": [{"rel": "self", "href": f"{base}/{path}/"}],
        "media-types": [{"base": "application/json",
                          "type": f"application/vnd.openstack.compute+json;version={media}"}],
    }


@router.get("/")
@documented(responses={200: responses.VERSIONS})
async def versions(request: Request):
    docs = []
    for ident in sorted(_VERSIONS):
        doc = _version_doc(request, ident)
        doc.pop("media-types")
        docs.append(doc)
    return JSONResponse({"versions": docs}, status_code=200)


def _detail(request: Request, ident: str) -> dict:
    doc = _version_doc(request, ident)
    doc["links"].append({"rel": "describedby", "type": "text/html", "href": _DOCS})
    return {"version": doc}


@router.get("/v2.1")
@router.get("/v2.1/")
@documented(responses={200: responses.VERSION})
async def version_v21(request: Request):
    return _detail(request, "v2.1")


@router.get("/v2")
@router.get("/v2/")
@documented(responses={200: responses.VERSION})
async def version_v20(request: Request):
    return _detail(request, "v2.0")
