"""``/v2.1/os-quota-sets`` (show, defaults, detail, update, delete) and ``/v2.1/os-quota-class-sets``
(show, update: the ``default`` class sets every project's defaults).

2.36 drops the network resources (floating_ips, fixed_ips, security_groups,
security_group_rules) from views and requests; 2.50 shows the server group
resources in quota classes and drops the network ones there; 2.57 drops the
injected_* ones; 2.75 refuses unknown query parameters (all but ``user_id``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest.validation import (BOOLEAN, MAX_INT, bool_from_string, query_schema, refuse_query_from_2102,
                                  validate, validate_query)
from nefos.control.compute import quota_sets as qs_mod
from nefos.openapi import documented
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

_QUOTA = {"type": ["integer", "string"], "pattern": "^-?[0-9]+$", "minimum": -1, "maximum": MAX_INT}


def update_schema(version) -> dict:
    props = {r: _QUOTA for r in qs_mod.resources_for(version, updatable=True)}
    props["force"] = BOOLEAN
    return {"type": "object",
            "properties": {"quota_set": {"type": "object", "properties": props, "additionalProperties": False}},
            "required": ["quota_set"], "additionalProperties": False}


def class_update_schema(version) -> dict:
    names = qs_mod.quota_class_resources(version)
    return {"type": "object", "properties": {"quota_class_set": {
        "type": "object", "properties": {n: _QUOTA for n in names}, "additionalProperties": False}},
        "required": ["quota_class_set"], "additionalProperties": False}


def _rt(request: Request):
    return request.app.state.rt


_QUERY = query_schema({"user_id": {"type": "string"}}, strict=False)
_QUERY_V275 = query_schema({"user_id": {"type": "string"}}, strict=True)


def _check_project(request: Request, project_id: str, action: str) -> None:
    if action != "defaults":
        validate_query(request.query_params, _QUERY_V275 if request.state.api_version.matches("2.75") else _QUERY)
    authorize(rest.get_context(request), f"os_compute_api:os-quota-sets:{action}", {"project_id": project_id})


def _format(request: Request, values: dict, project_id: str | None) -> dict:
    body = {r: values[r] for r in qs_mod.resources_for(request.state.api_version)}
    if project_id is not None:
        body = {"id": project_id, **body}
    return body


@router.get("/v2.1/os-quota-sets/{project_id}")
@documented(query=_QUERY, responses={200: responses.QUOTA_SET})
async def show_quota_set(request: Request, project_id: str):
    _check_project(request, project_id, "show")
    rt = _rt(request)
    return {"quota_set": _format(request, await qs_mod.get_limits(rt.db, rt.cfg, project_id), project_id)}


@router.get("/v2.1/os-quota-sets/{project_id}/defaults")
@documented(responses={200: responses.QUOTA_SET})
async def show_quota_defaults(request: Request, project_id: str):
    _check_project(request, project_id, "defaults")
    rt = _rt(request)
    return {"quota_set": _format(request, await qs_mod.get_defaults(rt.db, rt.cfg), project_id)}


@router.get("/v2.1/os-quota-sets/{project_id}/detail")
@documented(query=_QUERY, responses={200: responses.QUOTA_SET_DETAIL})
async def show_quota_detail(request: Request, project_id: str):
    _check_project(request, project_id, "detail")
    rt = _rt(request)
    limits = await qs_mod.get_limits(rt.db, rt.cfg, project_id)
    used = await qs_mod.get_usages(rt.db, project_id)
    detail = {r: {"limit": limits[r], "in_use": used.get(r, 0), "reserved": 0} for r in limits}
    return {"quota_set": _format(request, detail, project_id)}


@router.put("/v2.1/os-quota-sets/{project_id}")
@documented(request=lambda: update_schema(microversion.MIN), query=_QUERY,
            responses={200: responses.QUOTA_SET_UPDATED})
async def update_quota_set(request: Request, project_id: str):
    body = await rest.json_body(request)
    validate(body, update_schema(request.state.api_version))
    _check_project(request, project_id, "update")
    quota_set = body["quota_set"]
    if "networks" in quota_set:
        raise exceptions.ValidationError("The networks quota is disabled")
    force = bool_from_string(quota_set.get("force", False))
    values = {k: int(v) for k, v in quota_set.items() if k != "force" and (v or v == 0)}
    rt = _rt(request)
    await qs_mod.update(rt.db, rt.cfg, project_id, values, force=force)
    return {"quota_set": _format(request, await qs_mod.get_limits(rt.db, rt.cfg, project_id), None)}


@router.delete("/v2.1/os-quota-sets/{project_id}")
@documented(query=_QUERY, responses={202: responses.NO_BODY})
async def delete_quota_set(request: Request, project_id: str):
    _check_project(request, project_id, "delete")
    await qs_mod.reset(_rt(request).db, project_id)
    return Response(status_code=202)


@router.get("/v2.1/os-quota-class-sets/{class_name}")
@documented(responses={200: responses.QUOTA_CLASS_SET})
async def show_quota_class_set(request: Request, class_name: str):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-quota-class-sets:show")
    version = request.state.api_version
    rt = _rt(request)
    values = await qs_mod.get_defaults(rt.db, rt.cfg)  # every class shows the defaults, as in Nova
    names = qs_mod.quota_class_resources(version)
    return {"quota_class_set": {"id": class_name, **{n: values[n] for n in names}}}


@router.put("/v2.1/os-quota-class-sets/{class_name}")
@documented(request=lambda: class_update_schema(microversion.MIN),
            responses={200: responses.QUOTA_CLASS_SET_UPDATED})
async def update_quota_class_set(request: Request, class_name: str):
    """Set the ``default`` class's limits: every project's defaults from now on (admin)."""
    authorize(rest.get_context(request), "os_compute_api:os-quota-class-sets:update")
    version = request.state.api_version
    names = qs_mod.quota_class_resources(version)
    body = await rest.json_body(request)
    validate(body, class_update_schema(version))
    if len(class_name) > 255:
        raise exceptions.ValidationError("Quota class name is too long (more than 255 characters).")
    values = {k: int(v) for k, v in body["quota_class_set"].items()}
    rt = _rt(request)
    # Only the default class is used (Nova ignores other classes too); others are stored all the same.
    await qs_mod.update_class(rt.db, class_name, values)
    current = await qs_mod.get_defaults(rt.db, rt.cfg)
    return {"quota_class_set": {n: current[n] for n in names}}
