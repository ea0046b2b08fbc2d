"""``/v2.1/os-services``: list, enable/disable (with a reason), force down, delete (admin only).

Before 2.53 a service is named by host and binary in the body of
``PUT /os-services/{enable,disable,disable-log-reason,force-down}``
(force-down from 2.11) and by its integer id in ``DELETE``. From 2.53 its id is
its uuid: ``PUT /os-services/{uuid}`` takes ``status`` / ``disabled_reason`` /
``forced_down`` and answers with the whole service. 2.75: unknown query
parameters of the list are refused (400).
"""

from __future__ import annotations

import copy

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.validation import (BOOLEAN, HOSTNAME, bool_from_string, is_uuid_like, query_schema, validate,
                                  validate_integer, validate_query)
from nefos.control.compute import services as services_mod
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

UPDATE = {
    "type": "object",
    "properties": {
        "host": HOSTNAME,
        "binary": {"type": "string", "minLength": 1, "maxLength": 255},
        "disabled_reason": {"type": "string", "minLength": 1, "maxLength": 255},
    },
    "required": ["host", "binary"],
    "additionalProperties": False,
}
UPDATE_V211 = copy.deepcopy(UPDATE)
UPDATE_V211["properties"]["forced_down"] = BOOLEAN
UPDATE_V253 = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["enabled", "disabled"]},
        "disabled_reason": {"type": "string", "minLength": 1, "maxLength": 255},
        "forced_down": BOOLEAN,
    },
    "additionalProperties": False,
}
_QUERY = {"host": {"type": "string"}, "binary": {"type": "string"}}
LIST_QUERY, LIST_QUERY_V275 = query_schema(_QUERY, strict=False), query_schema(_QUERY, strict=True)


def _rt(request: Request):
    return request.app.state.rt


def view(request: Request, svc: dict) -> dict:
    body = {"binary": svc["binary"], "host": svc["host"], "id": svc["id"], "zone": svc["zone"],
            "status": svc["status"], "state": svc["state"], "updated_at": common.iso_micro(svc["updated_at"]),
            "disabled_reason": svc["disabled_reason"]}
    if request.state.api_version.matches("2.11"):
        body["forced_down"] = bool(svc["forced_down"])
    if request.state.api_version.matches("2.53"):
        body["id"] = svc["uuid"]
    return body


@router.get("/v2.1/os-services")
@documented(query=LIST_QUERY, responses={200: responses.SERVICES})
async def list_services(request: Request):
    authorize(rest.get_context(request), "os_compute_api:os-services:list")
    params = request.query_params
    validate_query(params, LIST_QUERY_V275 if request.state.api_version.matches("2.75") else LIST_QUERY)
    rt = _rt(request)
    services = await services_mod.list_services(rt.db, rt.cfg, host=params.get("host"),
                                                binary=params.get("binary"))
    return {"services": [view(request, s) for s in services]}


def _check_updatable(binary: str) -> None:
    if binary != services_mod.COMPUTE_BINARY:
        raise exceptions.ValidationError(
            f"Updating a {binary} service is not supported. Only {services_mod.COMPUTE_BINARY} "
            "services can be updated.")


@router.put("/v2.1/os-services/{action}")
@documented(request=UPDATE, responses={200: responses.SERVICE_UPDATED})
async def update_service(request: Request, action: str):
    version = request.state.api_version
    if version.matches("2.53"):
        return await _update_v253(request, action)
    actions = {"enable", "disable", "disable-log-reason"}
    if version.matches("2.11"):
        actions.add("force-down")
    body = await rest.json_body(request)
    validate(body, UPDATE_V211 if version.matches("2.11") else UPDATE)
    authorize(rest.get_context(request), "os_compute_api:os-services:update")
    if action not in actions:
        raise exceptions.NotFound("Unknown action")
    db = _rt(request).db
    host, binary = body["host"], body["binary"]
    if action == "force-down":
        if "forced_down" not in body:
            raise exceptions.ValidationError("Missing forced_down field")
        forced_down = bool_from_string(body["forced_down"])
        _check_updatable(binary)
        await services_mod.set_forced_down(db, host, binary, forced_down)
        return {"service": {"host": host, "binary": binary, "forced_down": forced_down}}
    if action == "disable-log-reason":
        if "disabled_reason" not in body:
            raise exceptions.ValidationError("Missing disabled reason field")
        reason = body["disabled_reason"]
        _check_updatable(binary)
        await services_mod.set_disabled(db, host, binary, True, reason)
        return {"service": {"host": host, "binary": binary, "status": "disabled", "disabled_reason": reason}}
    enable = action == "enable"
    _check_updatable(binary)
    await services_mod.set_disabled(db, host, binary, not enable)
    return {"service": {"host": host, "binary": binary, "status": "enabled" if enable else "disabled"}}


async def _update_v253(request: Request, service_id: str) -> dict:
    body = await rest.json_body(request)
    validate(body, UPDATE_V253)
    if not is_uuid_like(service_id):
        raise exceptions.ValidationError(f"Invalid uuid {service_id}")
    authorize(rest.get_context(request), "os_compute_api:os-services:update")
    values: dict = {}
    if "status" in body:
        if body["status"] == "enabled":
            if body.get("disabled_reason"):
                raise exceptions.ValidationError("Specifying 'disabled_reason' with status 'enabled' is invalid.")
            values.update(disabled=False, disabled_reason=None)
        else:
            values.update(disabled=True, disabled_reason=body.get("disabled_reason"))
    if "forced_down" in body:
        values["forced_down"] = bool_from_string(body["forced_down"], strict=True)
    rt = _rt(request)
    if not values:
        await services_mod.get_service(rt.db, rt.cfg, service_id)  # 404 first, as Nova looks it up first
        raise exceptions.ValidationError("No updates were requested. Fields 'status' or 'forced_down' "
                                         "should be specified.")
    return {"service": view(request, await services_mod.update_by_uuid(rt.db, rt.cfg, service_id, values))}


@router.delete("/v2.1/os-services/{service_id}")
@documented(responses={204: responses.NO_BODY})
async def delete_service(request: Request, service_id: str):
    authorize(rest.get_context(request), "os_compute_api:os-services:delete")
    if request.state.api_version.matches("2.53"):
        if not is_uuid_like(service_id):
            raise exceptions.ValidationError(f"Invalid uuid {service_id}")
        await services_mod.delete_service(_rt(request).db, service_id)
    else:
        number = validate_integer(service_id, "id")
        try:
            rest.parse_int64(number)
        except ValueError:  # no such id fits the database's integers
            raise exceptions.ServiceNotFound(service_id=service_id) from None
        await services_mod.delete_service(_rt(request).db, number)
    return Response(status_code=204)
