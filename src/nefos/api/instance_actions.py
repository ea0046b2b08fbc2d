"""``/v2.1/servers/{id}/os-instance-actions``: what was done to a server, step by step."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import policy, rest
from nefos.api.server_view import iso_micro

router = APIRouter()


def _action_view(action: dict) -> dict:
    return {"action": action["action"], "instance_uuid": action["instance_uuid"],
            "request_id": action["request_id"], "user_id": action["user_id"],
            "project_id": action["project_id"], "start_time": iso_micro(action["start_time"]),
            "message": action.get("message")}


@router.get("/v2.1/servers/{server_id}/os-instance-actions")
async def list_actions(request: Request, server_id: str):
    ctx = rest.get_context(request)
    policy.enforce(ctx, "os_compute_api:os-instance-actions:list")
    actions = await request.app.state.compute_api.list_actions(ctx, server_id)
    return {"instanceActions": [_action_view(a) for a in actions]}


@router.get("/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
async def show_action(request: Request, server_id: str, request_id: str):
    ctx = rest.get_context(request)
    policy.enforce(ctx, "os_compute_api:os-instance-actions:show")
    traceback = policy.check(ctx, "os_compute_api:os-instance-actions:events:details")
    action = await request.app.state.compute_api.get_action(ctx, server_id, request_id)
    view = _action_view(action)
    events = []
    for event in action["events"]:
        e = {"event": event["event"], "start_time": iso_micro(event["start_time"]),
             "finish_time": iso_micro(event["finish_time"]), "result": event["result"]}
        if traceback:
            e["traceback"] = event["traceback"]
        events.append(e)
    view["events"] = events
    return {"instanceAction": view}
