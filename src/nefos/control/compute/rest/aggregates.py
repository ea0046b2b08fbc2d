"""``/v2.1/os-aggregates``: host aggregates (admin only, Nova's ``os_compute_api:os-aggregates:*``).

Create (name, optional availability zone), list, show, update (name and/or zone), delete (400
while hosts are in it), and the ``add_host`` / ``remove_host`` / ``set_metadata`` actions (a null
metadata value deletes the key). Success answers are 200, as Nova's (kept for compatibility), and
the views carry every field of Nova's Aggregate object, ``uuid`` from 2.41. 2.81:
``POST /os-aggregates/{id}/images`` asks the aggregate's hosts to cache images (202). As in Nova
the body is validated first, then the policy, then the id (an integer, else 400).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.server_actions import no_such_action, single_action
from nefos.control.compute.rest.validation import (AZ_NAME, HOSTNAME, NAME, NAME_WITH_SPACES, UUID, refuse_query_from_2102, validate,
                                  validate_integer)
from nefos.control.compute import aggregates as aggregates_mod
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

LOG = logging.getLogger(__name__)
router = APIRouter()

_ZONE = {"oneOf": [AZ_NAME, {"type": "null"}]}
CREATE = {
    "type": "object",
    "properties": {"aggregate": {
        "type": "object", "properties": {"name": NAME, "availability_zone": _ZONE},
        "required": ["name"], "additionalProperties": False}},
    "required": ["aggregate"], "additionalProperties": False,
}
UPDATE = {
    "type": "object",
    "properties": {"aggregate": {
        "type": "object", "properties": {"name": NAME_WITH_SPACES, "availability_zone": _ZONE},
        "additionalProperties": False,
        "anyOf": [{"required": ["name"]}, {"required": ["availability_zone"]}]}},
    "required": ["aggregate"], "additionalProperties": False,
}


def _host_action(name: str) -> dict:
    return {"type": "object", "properties": {name: {
        "type": "object", "properties": {"host": HOSTNAME}, "required": ["host"], "additionalProperties": False}},
        "required": [name], "additionalProperties": False}


_METADATA_WITH_NULL = {
    "type": "object",
    "patternProperties": {"^[a-zA-Z0-9-_:. ]{1,255}$": {"type": ["string", "null"], "maxLength": 255}},
    "additionalProperties": False,
}
ACTIONS = {
    "add_host": _host_action("add_host"),
    "remove_host": _host_action("remove_host"),
    "set_metadata": {"type": "object", "properties": {"set_metadata": {
        "type": "object", "properties": {"metadata": _METADATA_WITH_NULL}, "required": ["metadata"],
        "additionalProperties": False}}, "required": ["set_metadata"], "additionalProperties": False},
}
CACHE_IMAGES = {
    "type": "object",
    "properties": {"cache": {"type": "array", "minItems": 1, "items": {
        "type": "object", "properties": {"id": UUID}, "required": ["id"], "additionalProperties": False}}},
    "required": ["cache"], "additionalProperties": False,
}


def _db(request: Request):
    return request.app.state.rt.db


def _aggregate_id(value: str) -> int:
    """Nova's ``validate_integer(id, 'id')`` (400); an id no database integer holds is no aggregate."""
    number = validate_integer(value, "id")
    try:
        return rest.parse_int64(number)
    except ValueError:
        raise exceptions.AggregateNotFound(aggregate_id=value) from None


def _normalize(name: str) -> str:
    # Nova's common.normalize_name: the legacy v2 leading/trailing spaces are stripped.
    return name.strip()


def view(request: Request, agg: dict, *, brief: bool = False) -> dict:
    body = {"availability_zone": agg["availability_zone"], "created_at": common.iso_micro(agg["created_at"]),
            "deleted": False, "deleted_at": None, "id": agg["id"], "name": agg["name"],
            "updated_at": common.iso_micro(agg["updated_at"])}
    if not brief:
        body["hosts"] = list(agg["hosts"])
        body["metadata"] = dict(agg["metadata"])
    if request.state.api_version.matches("2.41"):
        body["uuid"] = agg["uuid"]
    return body


@router.get("/v2.1/os-aggregates")
@documented(responses={200: responses.AGGREGATES})
async def list_aggregates(request: Request):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-aggregates:index")
    return {"aggregates": [view(request, a) for a in await aggregates_mod.list_aggregates(_db(request))]}


@router.post("/v2.1/os-aggregates")
@documented(request=CREATE, responses={200: responses.AGGREGATE_CREATED})
async def create_aggregate(request: Request):
    body = await rest.json_body(request)
    validate(body, CREATE)
    authorize(rest.get_context(request), "os_compute_api:os-aggregates:create")
    params = body["aggregate"]
    zone = params.get("availability_zone")
    agg = await aggregates_mod.create_aggregate(_db(request), _normalize(params["name"]),
                                                _normalize(zone) if zone else None)
    return {"aggregate": view(request, agg, brief=True)}


@router.get("/v2.1/os-aggregates/{aggregate_id}")
@documented(responses={200: responses.AGGREGATE})
async def show_aggregate(request: Request, aggregate_id: str):
    refuse_query_from_2102(request)
    authorize(rest.get_context(request), "os_compute_api:os-aggregates:show")
    agg = await aggregates_mod.get_aggregate(_db(request), _aggregate_id(aggregate_id))
    return {"aggregate": view(request, agg)}


@router.put("/v2.1/os-aggregates/{aggregate_id}")
@documented(request=UPDATE, responses={200: responses.AGGREGATE})
async def update_aggregate(request: Request, aggregate_id: str):
    body = await rest.json_body(request)
    validate(body, UPDATE)
    authorize(rest.get_context(request), "os_compute_api:os-aggregates:update")
    values = dict(body["aggregate"])
    if "name" in values:
        values["name"] = _normalize(values["name"])
    agg = await aggregates_mod.update_aggregate(_db(request), _aggregate_id(aggregate_id), values)
    return {"aggregate": view(request, agg)}


@router.delete("/v2.1/os-aggregates/{aggregate_id}")
@documented(responses={200: responses.NO_BODY})
async def delete_aggregate(request: Request, aggregate_id: str):
    authorize(rest.get_context(request), "os_compute_api:os-aggregates:delete")
    await aggregates_mod.delete_aggregate(_db(request), _aggregate_id(aggregate_id))
    return Response(status_code=200)


@router.post("/v2.1/os-aggregates/{aggregate_id}/action")
@documented(request={"anyOf": list(ACTIONS.values())}, responses={200: responses.AGGREGATE})
async def aggregate_action(request: Request, aggregate_id: str):
    body = await rest.json_body(request)
    name, _args = single_action(body)
    if name not in ACTIONS:
        raise no_such_action(name)
    validate(body, ACTIONS[name])
    authorize(rest.get_context(request), f"os_compute_api:os-aggregates:{name}")
    number, db = _aggregate_id(aggregate_id), _db(request)
    if name == "set_metadata":
        agg = await aggregates_mod.update_metadata(db, number, body[name]["metadata"])
        return {"aggregate": view(request, agg)}
    host = body[name]["host"]
    try:
        if name == "add_host":
            agg = await aggregates_mod.add_host(db, number, host)
        else:
            agg = await aggregates_mod.remove_host(db, number, host)
    except exceptions.InvalidAggregateAction as exc:
        # Nova answers a refused host move 409 here (400 for update and set_metadata).
        raise exceptions.Conflict(str(exc)) from None
    except (exceptions.AggregateHostNotFound, exceptions.ComputeHostNotFound, exceptions.AggregateNotFound):
        if name == "add_host":
            raise
        # Nova words every "not found" of remove_host the same way.
        raise exceptions.NotFound(f"Cannot remove host {host} in aggregate {aggregate_id}") from None
    return {"aggregate": view(request, agg)}


@router.post("/v2.1/os-aggregates/{aggregate_id}/images")
@documented(request=CACHE_IMAGES, responses={202: responses.NO_BODY})
async def cache_images(request: Request, aggregate_id: str):
    if not request.state.api_version.matches("2.81"):
        raise exceptions.NotFound("The resource could not be found.")
    body = await rest.json_body(request)
    validate(body, CACHE_IMAGES)
    authorize(rest.get_context(request), "compute:aggregates:images")
    number = _aggregate_id(aggregate_id)
    image_ids = [item["id"] for item in body["cache"]]
    if len(set(image_ids)) != len(image_ids):
        raise exceptions.ValidationError("Duplicate images in request")
    agg = await aggregates_mod.get_aggregate(_db(request), number)
    # The images are fetched when a server needs them (the fake and local drivers keep no separate
    # cache to warm), so the request is recorded and accepted, as Nova's conductor casts it.
    LOG.info("caching images %s requested on the hosts of aggregate %s: %s", image_ids, agg["id"], agg["hosts"])
    return Response(status_code=202)
