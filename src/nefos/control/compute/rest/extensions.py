"""``/v2.1/extensions``: Nova's fixed list of the v2.1 API's extension aliases.

Extensions are gone from the v2.1 API (microversions replaced them); Nova still answers this
list, unchanged since 2014, for clients that probe it. ``{alias}`` names one (404 otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_NAMESPACE = "http://docs.openstack.org/compute/ext/fake_xml"
_UPDATED = "2014-12-03T00:00:00Z"
# [alias, name, description] rows, sorted by alias as Nova lists them.
_ROWS = json.loads((Path(__file__).parent / "extension_list.json").read_text())
EXTENSIONS = [{"alias": alias, "description": description, "links": [], "name": name,
               "namespace": _NAMESPACE, "updated": _UPDATED} for alias, name, description in _ROWS]
_BY_ALIAS = {ext["alias"]: ext for ext in EXTENSIONS}


@router.get("/v2.1/extensions")
@documented(responses={200: responses.EXTENSIONS})
async def list_extensions(request: Request):
    authorize(rest.get_context(request), "os_compute_api:extensions", {})
    return {"extensions": EXTENSIONS}


@router.get("/v2.1/extensions/{alias}")
@documented(responses={200: responses.EXTENSION})
async def show_extension(request: Request, alias: str):
    authorize(rest.get_context(request), "os_compute_api:extensions", {})
    if alias not in _BY_ALIAS:
        raise exceptions.NotFound("The resource could not be found.")
    return {"extension": _BY_ALIAS[alias]}
