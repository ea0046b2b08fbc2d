"""``/v2.1/os-keypairs``: list, show, create (generate or import), delete (Compute API reference).

2.2: ``type`` (ssh/x509), create answers 201 and delete 204; 2.10: admins act
for another user with ``user_id``; 2.35: ``limit``/``marker`` paging; 2.75: unknown query parameters are refused;
2.92: import only (``public_key`` required, nothing generated), ``@`` and ``.`` allowed in names.
"""

from __future__ import annotations

import copy

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from nefos import rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.validation import NAME, NON_NEGATIVE_INTEGER, query_schema, validate, validate_query
from nefos.control.compute import keypairs as keypairs_mod
from nefos.openapi import documented
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

CREATE = {
    "type": "object",
    "properties": {
        "keypair": {
            "type": "object",
            "properties": {"name": NAME, "public_key": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "required": ["keypair"],
    "additionalProperties": False,
}
CREATE_V22 = copy.deepcopy(CREATE)
CREATE_V22["properties"]["keypair"]["properties"]["type"] = {"type": "string", "enum": ["ssh", "x509"]}
CREATE_V210 = copy.deepcopy(CREATE_V22)
CREATE_V210["properties"]["keypair"]["properties"]["user_id"] = {"type": "string"}
CREATE_V292 = copy.deepcopy(CREATE_V210)
CREATE_V292["properties"]["keypair"]["properties"]["name"] = {
    "allOf": [NAME, {"type": "string", "pattern": r"^[_\-\@\. a-zA-Z0-9]+$", "minLength": 1, "maxLength": 255}]}
CREATE_V292["properties"]["keypair"]["required"] = ["name", "public_key"]


def _create_schema(version) -> dict:
    if version.matches("2.92"):
        return CREATE_V292
    return CREATE_V210 if version.matches("2.10") else CREATE_V22 if version.matches("2.2") else CREATE


_USER = {"user_id": {"type": "string"}}
_PAGES = {"limit": NON_NEGATIVE_INTEGER, "marker": {"type": "string"}}
QUERY_V275 = {"index": query_schema({**_USER, **_PAGES}, strict=True),
              "show": query_schema(_USER, strict=True), "delete": query_schema(_USER, strict=True)}


def _user_id(request: Request, action: str, requested: str | None = None) -> str:
    """Whose key pairs: the caller's, or (2.10, admins only) another user's."""
    if action in QUERY_V275 and request.state.api_version.matches("2.75"):
        validate_query(request.query_params, QUERY_V275[action])
    ctx = rest.get_context(request)
    if requested is None and request.state.api_version.matches("2.10"):
        requested = request.query_params.get("user_id")
    user_id = requested or ctx.user_id
    authorize(ctx, f"os_compute_api:os-keypairs:{action}", {"user_id": user_id})
    return user_id


def _with_type(request: Request, view: dict, keypair: dict) -> dict:
    if request.state.api_version.matches("2.2"):
        view["type"] = keypair["type"]
    return view


@router.get("/v2.1/os-keypairs")
@documented(responses={200: responses.KEYPAIRS})
async def list_keypairs(request: Request):
    version = request.state.api_version
    user_id = _user_id(request, "index")
    limit = marker = None
    if version.matches("2.35"):
        limit, marker = common.limit_and_marker(request)
    keypairs = await keypairs_mod.list_keypairs(request.app.state.rt.db, user_id, limit=limit, marker=marker)
    body: dict = {"keypairs": [
        {"keypair": _with_type(request, {"name": k["name"], "public_key": k["public_key"],
                                         "fingerprint": k["fingerprint"]}, k)}
        for k in keypairs]}
    if version.matches("2.35"):
        links = common.collection_links(request, keypairs, "os-keypairs", "name")
        if links:
            body["keypairs_links"] = links
    return body


@router.get("/v2.1/os-keypairs/{name}")
@documented(responses={200: responses.KEYPAIR})
async def show_keypair(request: Request, name: str):
    user_id = _user_id(request, "show")
    k = await keypairs_mod.get_keypair(request.app.state.rt.db, user_id, name)
    view = {"public_key": k["public_key"], "name": k["name"], "fingerprint": k["fingerprint"],
            "user_id": k["user_id"], "deleted": False, "created_at": common.iso_micro(k["created_at"]),
            "updated_at": common.iso_micro(k["updated_at"]), "deleted_at": None, "id": k["id"]}
    return {"keypair": _with_type(request, view, k)}


@router.post("/v2.1/os-keypairs")
@documented(request=lambda: _create_schema(microversion.MIN), responses={200: responses.KEYPAIR_CREATED})
async def create_keypair(request: Request):
    version = request.state.api_version
    body = await rest.json_body(request)
    validate(body, _create_schema(version))
    params = body["keypair"]
    ctx = rest.get_context(request)
    user_id = _user_id(request, "create", params.get("user_id"))
    k = await keypairs_mod.create_keypair(
        request.app.state.rt.db, request.app.state.rt.cfg, user_id=user_id, project_id=ctx.project_id,
        name=params["name"], key_type=params.get("type", keypairs_mod.TYPE_SSH),
        public_key=params.get("public_key"), extra_name_chars="@." if version.matches("2.92") else "")
    view = {"name": k["name"], "public_key": k["public_key"], "fingerprint": k["fingerprint"],
            "user_id": k["user_id"]}
    if "private_key" in k:
        view["private_key"] = k["private_key"]
    _with_type(request, view, k)
    return JSONResponse({"keypair": view}, status_code=201 if version.matches("2.2") else 200)


@router.delete("/v2.1/os-keypairs/{name}")
@documented(responses={202: responses.NO_BODY})
async def delete_keypair(request: Request, name: str):
    user_id = _user_id(request, "delete")
    await keypairs_mod.delete_keypair(request.app.state.rt.db, user_id, name)
    return Response(status_code=204 if request.state.api_version.matches("2.2") else 202)
