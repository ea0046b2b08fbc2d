"""Version documents: ``/`` and ``/v2.1``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from nefos.api import microversion
from nefos.api import response_schemas as responses
from nefos.openapi import documented

router = APIRouter()

_UPDATED = "2013-07-23T11:33:21Z"


def _version_doc(request: Request) -> dict:
    base = str(request.base_url).rstrip("/")
    return {
        "id": "v2.1",
        "status": "CURRENT",
        "version": microversion.MAX_VERSION,
        "min_version": microversion.MIN_VERSION,
        "updated": _UPDATED,
        "links": [{"rel": "self", "href": f"{base}/v2.1/"}],
        "media-types": [{"base": "application/json",
                          "type": "application/vnd.openstack.compute+json;version=2.1"}],
    }


@router.get("/")
@documented(responses={200: responses.VERSIONS})
async def versions(request: Request):
    doc = _version_doc(request)
    doc.pop("media-types")
    return JSONResponse({"versions": [doc]}, status_code=200)


@router.get("/v2.1")
@router.get("/v2.1/")
@documented(responses={200: responses.VERSION})
async def version_v21(request: Request):
    doc = _version_doc(request)
    doc["links"].append({"rel": "describedby", "type": "text/html",
                         "href": "https://docs.openstack.org/"})
    return {"version": doc}
