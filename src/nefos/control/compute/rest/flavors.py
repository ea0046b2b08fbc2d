"""``/v2.1/flavors``: list, detail, show, create, update, delete, extra specs and access (Compute API
reference).

2.55: ``description`` (set on create, changed by ``PUT /flavors/{id}``, shown in
every view); 2.61: ``extra_specs`` in the detailed views, when the caller may
list extra specs; 2.75: ``swap`` is 0 rather than "" and unknown query
parameters of the lists are refused; 2.86: the extra specs Nova knows are validated
on create and update (``nefos.control.compute.extra_specs``); 2.102: a ``name`` list filter,
no ``rxtx_factor`` or ``OS-FLV-DISABLED:disabled`` (views, create, sort key) and no
query parameter where none is read.
"""

from __future__ import annotations

import copy

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common
from nefos import policy
from nefos.control.compute.rest.validation import (BOOLEAN, MAX_INT, NAME, NON_NEGATIVE_INTEGER, bool_from_string, query_schema,
                                  refuse_query_from_2102, validate, validate_integer, validate_query)
from nefos.control.compute import flavors as flavors_mod
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

_FLAVOR_INT = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 1, "maximum": MAX_INT}
_FLAVOR_INT0 = dict(_FLAVOR_INT, minimum=0)

CREATE = {
    "type": "object",
    "properties": {
        "flavor": {
            "type": "object",
            "properties": {
                "name": NAME,
                "id": {"type": ["string", "number", "null"], "minLength": 1, "maxLength": 255,
                       "pattern": r"^(?! )[a-zA-Z0-9. _-]+(?<! )$"},
                "ram": _FLAVOR_INT,
                "vcpus": _FLAVOR_INT,
                "disk": _FLAVOR_INT0,
                "OS-FLV-EXT-DATA:ephemeral": _FLAVOR_INT0,
                "swap": _FLAVOR_INT0,
                "rxtx_factor": {"type": ["number", "string"], "pattern": r"^[0-9]+(\.[0-9]+)?$",
                                "minimum": 0, "exclusiveMinimum": True, "maximum": 3.40282e+38},
                "os-flavor-access:is_public": BOOLEAN,
            },
            "required": ["name", "ram", "vcpus", "disk"],
            "additionalProperties": False,
        },
    },
    "required": ["flavor"],
    "additionalProperties": False,
}

# 2.55: a description of up to 64 KiB (Nova's TEXT column), no control characters.
_DESCRIPTION = {"type": ["string", "null"], "minLength": 0, "maxLength": 65535,
                "pattern": r"^[^\x00-\x1f\x7f]*$"}
CREATE_V255 = copy.deepcopy(CREATE)
CREATE_V255["properties"]["flavor"]["properties"]["description"] = _DESCRIPTION
# 2.102: rxtx_factor is gone (refused on create, absent from the views).
CREATE_V2102 = copy.deepcopy(CREATE_V255)
del CREATE_V2102["properties"]["flavor"]["properties"]["rxtx_factor"]
UPDATE = {"type": "object", "properties": {"flavor": {
    "type": "object", "properties": {"description": _DESCRIPTION}, "required": ["description"],
    "additionalProperties": False}}, "required": ["flavor"], "additionalProperties": False}

_SPEC_KEY = r"^[a-zA-Z0-9-_:. ]{1,255}$"
_SPEC_VALUE = {"type": ["string", "number", "boolean"], "minLength": 0, "maxLength": 255}
EXTRA_SPECS_CREATE = {
    "type": "object",
    "properties": {
        "extra_specs": {"type": "object", "patternProperties": {_SPEC_KEY: _SPEC_VALUE},
                        "additionalProperties": False},
    },
    "required": ["extra_specs"],
    "additionalProperties": False,
}
EXTRA_SPEC_UPDATE = {"type": "object", "patternProperties": {_SPEC_KEY: _SPEC_VALUE},
                     "additionalProperties": False, "minProperties": 1, "maxProperties": 1}

_TENANT = {"type": "object", "properties": {"tenant": {"type": "string", "minLength": 1, "maxLength": 255}},
           "required": ["tenant"], "additionalProperties": False}
ADD_TENANT_ACCESS = {"type": "object", "properties": {"addTenantAccess": _TENANT},
                     "required": ["addTenantAccess"], "additionalProperties": False}
REMOVE_TENANT_ACCESS = {"type": "object", "properties": {"removeTenantAccess": _TENANT},
                        "required": ["removeTenantAccess"], "additionalProperties": False}
ACCESS_ACTION = {"anyOf": [ADD_TENANT_ACCESS, REMOVE_TENANT_ACCESS]}

_LIST_PARAMS = {"limit": NON_NEGATIVE_INTEGER, "marker": {"type": "string"}, "is_public": {"type": "string"},
                "minRam": {"type": "string"}, "minDisk": {"type": "string"},
                "sort_key": {"type": "string", "enum": flavors_mod.SORT_KEYS},
                "sort_dir": {"type": "string", "enum": ["asc", "desc"]}}
LIST_QUERY = query_schema(_LIST_PARAMS, strict=False)
LIST_QUERY_V275 = query_schema(_LIST_PARAMS, strict=True)
# 2.102: a ``name`` filter (a regular expression, as Nova matches it), no ``rxtx_factor`` sort key.
LIST_QUERY_V2102 = query_schema({**_LIST_PARAMS, "name": {"type": "string"}, "sort_key": {
    "type": "string", "enum": [k for k in flavors_mod.SORT_KEYS if k != "rxtx_factor"]}}, strict=True)


def _db(request: Request):
    return request.app.state.rt.db


# Views ---------------------------------------------------------------------------

def basic_view(request: Request, flavor: dict) -> dict:
    view = {"id": flavor["flavorid"], "name": flavor["name"],
            "links": common.links(request, "flavors", flavor["flavorid"])}
    if request.state.api_version.matches("2.55"):
        view["description"] = flavor.get("description")
    return view


def _with_extra_specs(request: Request) -> bool:
    """2.61: detailed views show extra specs to a caller the extra-specs index rule lets see them."""
    return (request.state.api_version.matches("2.61")
            and policy.check(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:index"))


def detail_view(request: Request, flavor: dict, extra_specs: bool = False) -> dict:
    version = request.state.api_version
    view = {
        "id": flavor["flavorid"],
        "name": flavor["name"],
        "ram": flavor["memory_mb"],
        "disk": flavor["root_gb"],
        "swap": flavor["swap"] if version.matches("2.75") else (flavor["swap"] or ""),
        "OS-FLV-EXT-DATA:ephemeral": flavor["ephemeral_gb"],
        "OS-FLV-DISABLED:disabled": flavor["disabled"],
        "vcpus": flavor["vcpus"],
        "os-flavor-access:is_public": flavor["is_public"],
        "rxtx_factor": flavor["rxtx_factor"] or "",
        "links": common.links(request, "flavors", flavor["flavorid"]),
    }
    if version.matches("2.55"):
        view["description"] = flavor.get("description")
    if extra_specs:
        view["extra_specs"] = flavor.get("extra_specs") or {}
    if version.matches("2.102"):
        del view["OS-FLV-DISABLED:disabled"], view["rxtx_factor"]
    return view


# Flavors -------------------------------------------------------------------------

def _parse_is_public(value: str | None) -> bool | None:
    if value is None:
        return True
    if value.strip().lower() == "none":
        return None
    try:
        return bool_from_string(value, strict=True)
    except exceptions.ValidationError:
        raise exceptions.ValidationError(f"Invalid is_public filter [{value}]")


async def _list(request: Request, detailed: bool):
    ctx = rest.get_context(request)
    params = request.query_params
    filters: dict = {}
    version = request.state.api_version
    validate_query(params, LIST_QUERY_V2102 if version.matches("2.102") else
                   LIST_QUERY_V275 if version.matches("2.75") else LIST_QUERY)
    if version.matches("2.102") and "name" in params:
        filters["name"] = params["name"]
    is_public = _parse_is_public(params.get("is_public")) if ctx.is_admin else True
    for param, name in (("minRam", "min_ram"), ("minDisk", "min_disk")):
        if param in params:
            try:
                filters[name] = rest.parse_int64(params[param])
            except ValueError:
                raise exceptions.ValidationError(f"Invalid {param} filter [{params[param]}]")
    limit, marker = common.limit_and_marker(request)
    flavors = await flavors_mod.list_flavors(
        _db(request), ctx, is_public=is_public, sort_key=params.get("sort_key") or "flavorid",
        sort_dir=params.get("sort_dir") or "asc", limit=limit, marker=marker, **filters)
    if detailed:
        specs = _with_extra_specs(request)
        body: dict = {"flavors": [detail_view(request, f, specs) for f in flavors]}
    else:
        body = {"flavors": [basic_view(request, f) for f in flavors]}
    links = common.collection_links(request, [{"id": f["flavorid"]} for f in flavors],
                                    "flavors/detail" if detailed else "flavors", "id")
    if links:
        body["flavors_links"] = links
    return body


@router.get("/v2.1/flavors")
@documented(query=LIST_QUERY, responses={200: responses.FLAVORS})
async def list_flavors(request: Request):
    return await _list(request, detailed=False)


@router.get("/v2.1/flavors/detail")
@documented(query=LIST_QUERY, responses={200: responses.FLAVORS_DETAIL})
async def list_flavors_detail(request: Request):
    return await _list(request, detailed=True)


@router.get("/v2.1/flavors/{flavor_id}")
@documented(responses={200: responses.FLAVOR_SHOWN})
async def show_flavor(request: Request, flavor_id: str):
    refuse_query_from_2102(request)
    flavor = await flavors_mod.get_by_flavor_id(_db(request), flavor_id, rest.get_context(request))
    return {"flavor": detail_view(request, flavor, _with_extra_specs(request))}


@router.put("/v2.1/flavors/{flavor_id}")
@documented(request=UPDATE, responses={200: responses.FLAVOR_SHOWN})
async def update_flavor(request: Request, flavor_id: str):
    """2.55: change a flavor's description (the only thing that can change)."""
    if not request.state.api_version.matches("2.55"):
        raise exceptions.NotFound("The resource could not be found.")
    body = await rest.json_body(request)
    validate(body, UPDATE)
    authorize(rest.get_context(request), "os_compute_api:os-flavor-manage:update")
    flavor = await flavors_mod.set_description(_db(request), flavor_id, body["flavor"]["description"])
    return {"flavor": detail_view(request, flavor, _with_extra_specs(request))}


@router.post("/v2.1/flavors")
@documented(request=CREATE, responses={200: responses.FLAVOR_SHOWN})
async def create_flavor(request: Request):
    body = await rest.json_body(request)
    version = request.state.api_version
    validate(body, CREATE_V2102 if version.matches("2.102") else CREATE_V255 if version.matches("2.55") else CREATE)
    authorize(rest.get_context(request), "os_compute_api:os-flavor-manage:create")
    spec = body["flavor"]
    values = {
        "memory_mb": validate_integer(spec["ram"], "ram", 1, MAX_INT),
        "vcpus": validate_integer(spec["vcpus"], "vcpus", 1, MAX_INT),
        "root_gb": validate_integer(spec["disk"], "disk", 0, MAX_INT),
        "ephemeral_gb": validate_integer(spec.get("OS-FLV-EXT-DATA:ephemeral", 0), "ephemeral", 0, MAX_INT),
        "swap": validate_integer(spec.get("swap", 0), "swap", 0, MAX_INT),
    }
    rxtx = float(spec.get("rxtx_factor", 1.0))
    if rxtx <= 0 or rxtx > 3.40282e+38:
        raise exceptions.ValidationError(
            "Invalid input received: 'rxtx_factor' argument must be a float between 0 and 3.40282e+38")
    is_public = bool_from_string(spec.get("os-flavor-access:is_public", True), strict=True)
    flavorid = spec.get("id")
    if isinstance(flavorid, (int, float)) and not isinstance(flavorid, bool):
        flavorid = str(flavorid)
    flavor = await flavors_mod.create(_db(request), name=spec["name"], flavorid=flavorid, rxtx_factor=rxtx,
                                      is_public=is_public, description=spec.get("description"), **values)
    return {"flavor": detail_view(request, flavor, _with_extra_specs(request))}


@router.delete("/v2.1/flavors/{flavor_id}")
@documented(responses={202: responses.NO_BODY})
async def delete_flavor(request: Request, flavor_id: str):
    authorize(rest.get_context(request), "os_compute_api:os-flavor-manage:delete")
    await flavors_mod.delete(_db(request), flavor_id)
    return Response(status_code=202)


# Extra specs ---------------------------------------------------------------------

def _spec_values(request: Request, specs: dict) -> dict[str, str]:
    """The values as strings; from 2.86 each known extra spec is validated (400), as Nova."""
    values = {k: str(v) for k, v in specs.items()}
    if request.state.api_version.matches("2.86"):
        from nefos.control.compute import extra_specs
        for name, value in values.items():
            extra_specs.validate(name, value)
    return values


@router.get("/v2.1/flavors/{flavor_id}/os-extra_specs")
@documented(responses={200: responses.EXTRA_SPECS})
async def list_extra_specs(request: Request, flavor_id: str):
    refuse_query_from_2102(request)
    ctx = authorize(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:index")
    specs = await flavors_mod.get_extra_specs(_db(request), flavor_id, ctx)
    return {"extra_specs": specs}


@router.post("/v2.1/flavors/{flavor_id}/os-extra_specs")
@documented(request=EXTRA_SPECS_CREATE, responses={200: responses.EXTRA_SPECS})
async def create_extra_specs(request: Request, flavor_id: str):
    body = await rest.json_body(request)
    validate(body, EXTRA_SPECS_CREATE)
    authorize(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:create")
    values = _spec_values(request, body["extra_specs"])
    specs = await flavors_mod.update_extra_specs(_db(request), flavor_id, values)
    return {"extra_specs": specs}


@router.get("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
@documented(responses={200: responses.EXTRA_SPEC})
async def show_extra_spec(request: Request, flavor_id: str, key: str):
    refuse_query_from_2102(request)
    ctx = authorize(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:show")
    specs = await flavors_mod.get_extra_specs(_db(request), flavor_id, ctx)
    if key not in specs:
        raise exceptions.FlavorExtraSpecsNotFound(flavor_id=flavor_id, extra_specs_key=key)
    return {key: specs[key]}


@router.put("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
@documented(request=EXTRA_SPEC_UPDATE, responses={200: responses.EXTRA_SPEC})
async def update_extra_spec(request: Request, flavor_id: str, key: str):
    body = await rest.json_body(request)
    validate(body, EXTRA_SPEC_UPDATE)
    authorize(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:update")
    values = _spec_values(request, body)
    if key not in body:
        raise exceptions.ValidationError("Request body and URI mismatch")
    specs = await flavors_mod.update_extra_specs(_db(request), flavor_id, values)
    return specs


@router.delete("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
@documented(responses={200: responses.NO_BODY})
async def delete_extra_spec(request: Request, flavor_id: str, key: str):
    authorize(rest.get_context(request), "os_compute_api:os-flavor-extra-specs:delete")
    await flavors_mod.delete_extra_spec(_db(request), flavor_id, key)
    return Response(status_code=200)


# Access to private flavors -----------------------------------------------------------

@router.get("/v2.1/flavors/{flavor_id}/os-flavor-access")
@documented(responses={200: responses.FLAVOR_ACCESS})
async def list_flavor_access(request: Request, flavor_id: str):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-flavor-access")
    return {"flavor_access": await flavors_mod.list_access(_db(request), flavor_id)}


@router.post("/v2.1/flavors/{flavor_id}/action")
@documented(request=ACCESS_ACTION, responses={200: responses.FLAVOR_ACCESS})
async def flavor_action(request: Request, flavor_id: str):
    body = await rest.json_body(request)
    if isinstance(body, dict) and "addTenantAccess" in body:
        validate(body, ADD_TENANT_ACCESS)
        authorize(rest.get_context(request), "os_compute_api:os-flavor-access:add_tenant_access")
        access = await flavors_mod.add_access(_db(request), flavor_id, body["addTenantAccess"]["tenant"])
    elif isinstance(body, dict) and "removeTenantAccess" in body:
        validate(body, REMOVE_TENANT_ACCESS)
        authorize(rest.get_context(request), "os_compute_api:os-flavor-access:remove_tenant_access")
        access = await flavors_mod.remove_access(_db(request), flavor_id, body["removeTenantAccess"]["tenant"])
    else:
        raise exceptions.ValidationError("There is no such action: %s" % (
            next(iter(body)) if isinstance(body, dict) and body else body))
    return JSONResponse({"flavor_access": access}, status_code=200)
