"""``/v2.1/servers/{id}/os-instance-actions``: what was done to a server, step by step.

2.51: a non-admin sees the events of an action too (before: only with the
``os-instance-actions:events`` rule, which also shows tracebacks); 2.58: the
list pages (``limit``, ``marker``: a request id, ``links``) and filters on
``changes-since``, each action shows ``updated_at``; 2.62: events show
``hostId`` (and ``host`` with the events rule); 2.66: ``changes-before``;
2.84: events show ``details`` (with the ``events:details`` rule).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, policy, rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.server_view import host_id, iso_micro
from nefos.control.compute.rest.validation import NON_NEGATIVE_INTEGER, query_schema, refuse_query_from_2102, validate_query
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_PAGING = {"limit": NON_NEGATIVE_INTEGER, "marker": {"type": "string"},
           "changes-since": {"type": "string", "format": "date-time"}}
LIST_QUERY_V258 = query_schema(_PAGING, strict=True, single=tuple(_PAGING))
_PAGING_V266 = {**_PAGING, "changes-before": {"type": "string", "format": "date-time"}}
LIST_QUERY_V266 = query_schema(_PAGING_V266, strict=True, single=tuple(_PAGING_V266))


def _action_view(action: dict, version) -> dict:
    view = {"action": action["action"], "instance_uuid": action["instance_uuid"],
            "request_id": action["request_id"], "user_id": action["user_id"],
            "project_id": action["project_id"], "start_time": iso_micro(action["start_time"]),
            "message": action.get("message")}
    if version.matches("2.58"):
        view["updated_at"] = iso_micro(action.get("updated_at"))
    return view


@router.get("/v2.1/servers/{server_id}/os-instance-actions")
@documented(responses={200: responses.INSTANCE_ACTIONS})
async def list_actions(request: Request, server_id: str):
    ctx = rest.get_context(request)
    authorize(ctx, "os_compute_api:os-instance-actions:list")
    version = request.state.api_version
    compute_api = request.app.state.compute_api
    if not version.matches("2.58"):
        actions = await compute_api.list_actions(ctx, server_id)
        return {"instanceActions": [_action_view(a, version) for a in actions]}
    validate_query(request.query_params, LIST_QUERY_V266 if version.matches("2.66") else LIST_QUERY_V258)
    since, before = common.changes_window(request, before=version.matches("2.66"))
    limit, marker = common.limit_and_marker(request)
    try:
        actions = await compute_api.list_actions(ctx, server_id, limit=limit, marker=marker,
                                                 changes_since=since, changes_before=before)
    except exceptions.MarkerNotFound:
        raise exceptions.ValidationError(f"Marker {marker} could not be found.") from None
    body: dict = {"instanceActions": [_action_view(a, version) for a in actions]}
    links = common.collection_links(request, body["instanceActions"],
                                    f"servers/{server_id}/os-instance-actions", "request_id")
    if links:
        body["links"] = links
    return body


@router.get("/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
@documented(responses={200: responses.INSTANCE_ACTION})
async def show_action(request: Request, server_id: str, request_id: str):
    refuse_query_from_2102(request)
    ctx = rest.get_context(request)
    authorize(ctx, "os_compute_api:os-instance-actions:show")
    version = request.state.api_version
    action = await request.app.state.compute_api.get_action(ctx, server_id, request_id)
    target = {"project_id": action["project_id"]}
    view = _action_view(action, version)
    privileged = policy.check(ctx, "os_compute_api:os-instance-actions:events", target)
    if not (privileged or version.matches("2.51")):
        return {"instanceAction": view}
    details = version.matches("2.84") and policy.check(ctx, "os_compute_api:os-instance-actions:events:details",
                                                       target)
    events = []
    for event in action["events"]:
        e = {"event": event["event"], "start_time": iso_micro(event["start_time"]),
             "finish_time": iso_micro(event["finish_time"]), "result": event["result"]}
        if privileged:
            e["traceback"] = event["traceback"]
        if version.matches("2.62"):
            if privileged:
                e["host"] = event.get("host") or ""
            e["hostId"] = host_id({"host": event.get("host"), "project_id": action["project_id"]})
        if details:
            e["details"] = event.get("details")
        events.append(e)
    view["events"] = events
    return {"instanceAction": view}
