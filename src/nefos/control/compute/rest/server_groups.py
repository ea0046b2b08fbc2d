"""``/v2.1/os-server-groups``: list, show, create, delete (Compute API reference).

2.13: ``project_id`` and ``user_id`` in the view; 2.15: soft-(anti-)affinity;
2.64: one ``policy`` and its ``rules`` (``max_server_per_host`` for
anti-affinity, which the scheduler honours) replace ``policies`` and
``metadata``; 2.75: unknown query parameters of the list are refused.
"""

from __future__ import annotations

import copy

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.validation import (NAME, NON_NEGATIVE_INTEGER, POSITIVE_INTEGER, query_schema,
                                  refuse_query_from_2102, validate, validate_query)
from nefos.objects import server_groups as groups_mod
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

CREATE = {
    "type": "object",
    "properties": {
        "server_group": {
            "type": "object",
            "properties": {
                "name": NAME,
                "policies": {
                    "type": "array",
                    "items": [{"type": "string", "enum": ["anti-affinity", "affinity"]}],
                    "uniqueItems": True,
                    "minItems": 1,
                    "maxItems": 1,
                    "additionalItems": False,
                },
            },
            "required": ["name", "policies"],
            "additionalProperties": False,
        },
    },
    "required": ["server_group"],
    "additionalProperties": False,
}
CREATE_V215 = copy.deepcopy(CREATE)
CREATE_V215["properties"]["server_group"]["properties"]["policies"]["items"][0]["enum"].extend(
    ["soft-anti-affinity", "soft-affinity"])
CREATE_V264 = copy.deepcopy(CREATE)
_V264 = CREATE_V264["properties"]["server_group"]
del _V264["properties"]["policies"]
_V264["properties"]["policy"] = {"type": "string", "enum": ["anti-affinity", "affinity", "soft-anti-affinity",
                                                            "soft-affinity"]}
_V264["properties"]["rules"] = {"type": "object", "properties": {"max_server_per_host": POSITIVE_INTEGER},
                                "additionalProperties": False}
_V264["required"] = ["name", "policy"]
_LIST_PARAMS = {"all_projects": {"type": "string"}, "limit": NON_NEGATIVE_INTEGER, "offset": NON_NEGATIVE_INTEGER}
LIST_QUERY, LIST_QUERY_V275 = query_schema(_LIST_PARAMS, strict=False), query_schema(_LIST_PARAMS, strict=True)


def view(request: Request, group: dict) -> dict:
    version = request.state.api_version
    body = {"id": group["uuid"], "name": group["name"], "members": group["members"]}
    if version.matches("2.64"):
        body["policy"] = group["policy"]
        body["rules"] = {k: int(v) for k, v in (group.get("rules") or {}).items()}
    else:
        body["policies"] = [group["policy"]] if group["policy"] else []
        body["metadata"] = {}
    if version.matches("2.13"):
        body["project_id"] = group["project_id"]
        body["user_id"] = group["user_id"]
    return body


async def _get_visible(request: Request, group_id: str, action: str) -> dict:
    group = await groups_mod.get_group(request.app.state.rt.db, group_id)
    authorize(rest.get_context(request), f"os_compute_api:os-server-groups:{action}",
              {"project_id": group["project_id"], "user_id": group["user_id"]})
    return group


@router.get("/v2.1/os-server-groups")
@documented(query=LIST_QUERY, responses={200: responses.SERVER_GROUPS})
async def list_server_groups(request: Request):
    ctx = authorize(rest.get_context(request), "os_compute_api:os-server-groups:index")
    strict = request.state.api_version.matches("2.75")
    validate_query(request.query_params, LIST_QUERY_V275 if strict else LIST_QUERY)
    project_id = ctx.project_id
    if "all_projects" in request.query_params:
        authorize(rest.get_context(request), "os_compute_api:os-server-groups:index:all_projects")
        project_id = None
    groups = await groups_mod.list_groups(request.app.state.rt.db, project_id)
    return {"server_groups": [view(request, g) for g in common.limited(request, groups)]}


@router.get("/v2.1/os-server-groups/{group_id}")
@documented(responses={200: responses.SERVER_GROUP_SHOWN})
async def show_server_group(request: Request, group_id: str):
    refuse_query_from_2102(request)
    return {"server_group": view(request, await _get_visible(request, group_id, "show"))}


@router.post("/v2.1/os-server-groups")
@documented(request=CREATE, responses={200: responses.SERVER_GROUP_SHOWN})
async def create_server_group(request: Request):
    body = await rest.json_body(request)
    version = request.state.api_version
    validate(body, CREATE_V264 if version.matches("2.64") else CREATE_V215 if version.matches("2.15") else CREATE)
    ctx = authorize(rest.get_context(request), "os_compute_api:os-server-groups:create")
    spec = body["server_group"]
    if version.matches("2.64"):
        policy, rules = spec["policy"], {k: int(v) for k, v in (spec.get("rules") or {}).items()}
        if rules and policy != "anti-affinity":
            raise exceptions.ValidationError("Only anti-affinity policy supports rules.")
    else:
        policy, rules = spec["policies"][0], {}
    rt = request.app.state.rt
    group = await groups_mod.create_group(rt.db, rt.cfg, name=spec["name"], policy=policy, rules=rules,
                                          project_id=ctx.project_id, user_id=ctx.user_id)
    return {"server_group": view(request, group)}


@router.delete("/v2.1/os-server-groups/{group_id}")
@documented(responses={204: responses.NO_BODY})
async def delete_server_group(request: Request, group_id: str):
    await _get_visible(request, group_id, "delete")
    await groups_mod.delete_group(request.app.state.rt.db, group_id)
    return Response(status_code=204)
