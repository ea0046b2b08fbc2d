"""``POST /v2.1/servers/{id}/action``: power and lock actions, each through its task_state."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions, rest
from nefos.control.compute.rest import (console_output, microversion, remote_consoles, server_admin_actions, server_evacuate,
                       server_floating_ips, server_image_actions, server_migrate_live, server_multinic, server_rescue,
                       server_resize_actions)
from nefos.control.compute.rest.validation import validate
from nefos.openapi import documented
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.authorization import authorize

router = APIRouter()

_REBOOT_SCHEMA = {"type": "object", "properties": {"reboot": {
    "type": "object", "properties": {"type": {"type": "string",
                                              "enum": ["HARD", "Hard", "hard", "SOFT", "Soft", "soft"]}},
    "required": ["type"], "additionalProperties": False}}, "required": ["reboot"]}
_LOCK_SCHEMA = {"type": "object", "properties": {"lock": {
    "type": ["object", "null"], "properties": {"locked_reason": {"type": "string", "maxLength": 255}},
    "additionalProperties": False}}}

_POWER_ACTIONS = {"os-start": "start", "os-stop": "stop", "pause": "pause", "unpause": "unpause",
                  "suspend": "suspend", "resume": "resume"}
# Each action's policy rule (Nova's names).
POLICIES = {
    "os-start": "os_compute_api:servers:start", "os-stop": "os_compute_api:servers:stop",
    "reboot": "os_compute_api:servers:reboot",
    "pause": "os_compute_api:os-pause-server:pause", "unpause": "os_compute_api:os-pause-server:unpause",
    "suspend": "os_compute_api:os-suspend-server:suspend",
    "resume": "os_compute_api:os-suspend-server:resume",
    "lock": "os_compute_api:os-lock-server:lock", "unlock": "os_compute_api:os-lock-server:unlock",
    "changePassword": "os_compute_api:os-admin-password",
    "rebuild": "os_compute_api:servers:rebuild",
    "addSecurityGroup": "os_compute_api:os-security-groups:add",
    "removeSecurityGroup": "os_compute_api:os-security-groups:remove",
}
# Actions Nova has only within a microversion range (min, max): outside it, 404 before anything else.
ACTION_VERSIONS = {
    "addFixedIp": ("2.1", "2.43"), "removeFixedIp": ("2.1", "2.43"),
    "addFloatingIp": ("2.1", "2.43"), "removeFloatingIp": ("2.1", "2.43"),
    "os-getVNCConsole": ("2.1", "2.5"), "os-getSPICEConsole": ("2.1", "2.5"),
    "os-getRDPConsole": ("2.1", "2.5"), "os-getSerialConsole": ("2.1", "2.5"),
    "trigger_crash_dump": ("2.17", None),
}
# Actions Nova removed (nova-network's): 410 Gone at every microversion.
REMOVED_ACTIONS = ("resetNetwork",)
_CHANGE_PASSWORD_SCHEMA = {"type": "object", "properties": {"changePassword": {
    "type": "object", "properties": {"adminPass": {"type": "string"}},
    "required": ["adminPass"], "additionalProperties": False}}, "required": ["changePassword"]}


def single_action(body) -> tuple[str, object]:
    """The one action an action body names; Nova's wsgi answers 400 for any other body."""
    if not isinstance(body, dict) or len(body) != 1:
        raise exceptions.ValidationError("Malformed request body")
    (name, args), = body.items()
    return name, args


def no_such_action(name: str) -> exceptions.ValidationError:
    """Nova answers an unknown action with 400 (nova.api.openstack.wsgi), not 404."""
    return exceptions.ValidationError(f"There is no such action: {name}")


def _security_group_schema(name: str) -> dict:
    return {"type": "object", "properties": {name: {
        "type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 255}},
        "required": ["name"], "additionalProperties": False}}, "required": [name]}


def _no_argument(name: str) -> dict:
    return {"type": "object", "properties": {name: {"type": "null"}}, "required": [name],
            "additionalProperties": False}


def action_schema() -> dict:
    """The actions' bodies at 2.1, one action per body: those validated with a schema use it, the
    others take null (actions Nefos does not support, and those not in 2.1, are left out)."""
    from nefos.control.compute.rest.servers import rebuild_schema
    with_schema = [_REBOOT_SCHEMA, {**_LOCK_SCHEMA, "required": ["lock"]}, _CHANGE_PASSWORD_SCHEMA,
                   console_output.SCHEMA, remote_consoles.VNC_SCHEMA, rebuild_schema(microversion.MIN),
                   _security_group_schema("addSecurityGroup"), _security_group_schema("removeSecurityGroup"),
                   server_resize_actions._RESIZE_SCHEMA, server_image_actions._CREATE_IMAGE_SCHEMA,
                   server_image_actions._CREATE_BACKUP_SCHEMA, server_admin_actions._RESET_STATE_SCHEMA,
                   server_floating_ips.ADD_SCHEMA, server_floating_ips.REMOVE_SCHEMA,
                   server_multinic.ADD_SCHEMA, server_multinic.REMOVE_SCHEMA, server_rescue.RESCUE_SCHEMA,
                   server_rescue.UNRESCUE_SCHEMA, server_migrate_live.SCHEMA, server_evacuate.SCHEMA]
    named = {name for schema in with_schema for name in schema["required"]}
    others = sorted({*_POWER_ACTIONS, "unlock", *server_resize_actions.HANDLERS, *server_image_actions.HANDLERS,
                     *server_admin_actions.HANDLERS} - named - set(server_admin_actions.UNSUPPORTED)
                    - {n for n, (low, _) in ACTION_VERSIONS.items() if low != microversion.MIN_VERSION})
    return {"anyOf": [*with_schema, *(_no_argument(name) for name in others)]}


@router.post("/v2.1/servers/{server_id}/action")
@documented(request=action_schema, responses={200: responses.CONSOLE_OUTPUT, 202: responses.NO_BODY,
                                                204: responses.NO_BODY},
            action_responses={**{name: {202: schema} for name, schema in responses.ACTION_BODIES.items()},
                              "os-getVNCConsole": {200: responses.VNC_CONSOLE},
                              "rescue": {200: responses.RESCUE}, "evacuate": {200: responses.EVACUATE}})
async def server_action(request: Request, server_id: str):
    ctx = rest.get_context(request)
    body = await rest.json_body(request)
    name, args = single_action(body)
    if name in ACTION_VERSIONS and not request.state.api_version.matches(*ACTION_VERSIONS[name]):
        raise exceptions.NotFound("The resource could not be found.")
    if name in REMOVED_ACTIONS:
        raise exceptions.Gone()
    if name in POLICIES:
        authorize(ctx, POLICIES[name])
    compute_api = request.app.state.compute_api
    if name in _POWER_ACTIONS:
        if args is not None and args != {}:
            raise exceptions.ValidationError(f"Invalid input for field/attribute {name}. "
                                             f"Value: {args}. None is expected.")
        await compute_api.power_action(ctx, server_id, _POWER_ACTIONS[name])
    elif name == "reboot":
        validate(body, _REBOOT_SCHEMA)
        kind = "reboot_hard" if body["reboot"]["type"].upper() == "HARD" else "reboot_soft"
        await compute_api.power_action(ctx, server_id, kind)
    elif name == "lock":
        validate(body, _LOCK_SCHEMA)
        reason = (args or {}).get("locked_reason")
        if reason is not None and not request.state.api_version.matches("2.73"):
            raise exceptions.ValidationError("Invalid input for field/attribute lock. "
                                             "Additional properties are not allowed ('locked_reason' was unexpected)")
        await compute_api.lock(ctx, server_id, reason)
    elif name == "unlock":
        await compute_api.unlock(ctx, server_id)
    elif name == "os-getConsoleOutput":
        return await console_output.console_output(request, ctx, server_id, body)
    elif name in remote_consoles.HANDLERS:
        return await remote_consoles.HANDLERS[name](request, ctx, server_id, body)
    elif name == "rebuild":
        from nefos.control.compute.rest.servers import rebuild_server
        return JSONResponse(await rebuild_server(request, ctx, server_id, body), status_code=202)
    elif name in ("addSecurityGroup", "removeSecurityGroup"):
        validate(body, _security_group_schema(name))
        await compute_api.change_security_group(ctx, server_id, body[name]["name"], add=name == "addSecurityGroup")
    elif name == "changePassword":
        validate(body, _CHANGE_PASSWORD_SCHEMA)
        await compute_api.set_admin_password(ctx, server_id, body["changePassword"]["adminPass"])
    elif name in server_resize_actions.HANDLERS:
        return await server_resize_actions.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_floating_ips.HANDLERS:
        await server_floating_ips.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_multinic.HANDLERS:
        await server_multinic.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_image_actions.HANDLERS:
        return await server_image_actions.handle(request, ctx, server_id, name, body)
    elif name in server_rescue.HANDLERS:
        return await server_rescue.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_evacuate.HANDLERS:
        return await server_evacuate.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_migrate_live.HANDLERS:
        return await server_migrate_live.HANDLERS[name](request, ctx, server_id, body)
    elif name in server_admin_actions.HANDLERS:
        await server_admin_actions.HANDLERS[name](request, ctx, server_id, body)
    else:
        raise no_such_action(name)
    return Response(status_code=202)
