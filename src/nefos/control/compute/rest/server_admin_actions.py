"""More ``POST /v2.1/servers/{id}/action`` actions: Nova's admin actions and the actions Nefos knows
but cannot carry out.

- ``os-resetState`` (admin): set vm_state to ``active`` or ``error`` and clear task_state, recorded
  as a ``resetState`` instance action (Nova's admin_actions).
- ``injectNetworkInfo`` (admin): accepted (202) and recorded; no Nefos driver injects network
  configuration into a running guest (as with Nova's libvirt driver, where it is a no-op).
- ``restore`` / ``forceDelete``: only for soft-deleted servers; Nefos deletes at once (Nova with
  ``reclaim_instance_interval = 0``), so an existing server always answers 409.
- Actions Nova has and Nefos does not implement (trigger_crash_dump; resize and cold migration are
  in ``server_resize_actions``, live migration in ``server_migrate_live``, evacuation in
  ``server_evacuate``, rescue in ``server_rescue``): the server is
  looked up first (404 when it is not there, as in Nova), then 501 Not Implemented, Nova's answer
  when a driver lacks the feature.
"""

from __future__ import annotations

from fastapi import Request

from nefos import exceptions
from nefos.control.compute.rest.validation import validate
from nefos.objects import actions, instance as instance_obj
from nefos.model import states
from nefos.control.compute.authorization import authorize

RESET_STATE = "resetState"
INJECT_NETWORK_INFO = "inject_network_info"

_RESET_STATE_SCHEMA = {"type": "object", "properties": {"os-resetState": {
    "type": "object", "properties": {"state": {"type": "string", "enum": ["active", "error"]}},
    "required": ["state"], "additionalProperties": False}}, "required": ["os-resetState"],
    "additionalProperties": False}

# Nova actions Nefos does not implement -> the policy rule Nova checks for them.
UNSUPPORTED = {
    "trigger_crash_dump": "os_compute_api:servers:trigger_crash_dump",
}


class ActionNotImplemented(exceptions.Error):
    """501: Nova's answer for a feature the hypervisor driver does not have."""
    code = 501
    message = "Action is not supported by this cloud."


def _compute_api(request: Request):
    return request.app.state.compute_api


def _db(request: Request):
    return request.app.state.rt.db


async def reset_state(request: Request, ctx, server_id: str, body: dict) -> None:
    validate(body, _RESET_STATE_SCHEMA)
    instance = await _compute_api(request).get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-admin-actions:reset_state",
              {"project_id": instance["project_id"]})
    state = states.ACTIVE if body["os-resetState"]["state"] == "active" else states.ERROR
    db = _db(request)
    await actions.record_action(db, ctx, server_id, RESET_STATE)
    await instance_obj.save(db, server_id, {"vm_state": state, "task_state": None})
    await actions.finish_action(db, ctx, server_id)


async def inject_network_info(request: Request, ctx, server_id: str, body: dict) -> None:
    instance = await _compute_api(request).get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-admin-actions:inject_network_info",
              {"project_id": instance["project_id"]})
    db = _db(request)
    await actions.record_action(db, ctx, server_id, INJECT_NETWORK_INFO)
    await actions.finish_action(db, ctx, server_id)


async def _soft_delete_only(request: Request, ctx, server_id: str, name: str, rule: str) -> None:
    instance = await _compute_api(request).get(ctx, server_id)
    authorize(ctx, rule, {"project_id": instance["project_id"]})
    # Nothing is ever soft-deleted here (reclaim_instance_interval = 0): every state is the wrong one.
    raise exceptions.InstanceInvalidState(action=name, instance_uuid=server_id, attr="vm_state",
                                          state=instance["vm_state"])


async def restore(request: Request, ctx, server_id: str, body: dict) -> None:
    await _soft_delete_only(request, ctx, server_id, "restore", "os_compute_api:os-deferred-delete:restore")


async def force_delete(request: Request, ctx, server_id: str, body: dict) -> None:
    await _soft_delete_only(request, ctx, server_id, "forceDelete",
                            "os_compute_api:os-deferred-delete:force")


async def unsupported(request: Request, ctx, server_id: str, body: dict) -> None:
    (name, _args), = body.items()
    await _compute_api(request).get(ctx, server_id)  # 404 first, as Nova looks the server up first
    raise ActionNotImplemented(f"Action {name} is not supported by this cloud.")


HANDLERS = {"os-resetState": reset_state, "injectNetworkInfo": inject_network_info,
            "restore": restore, "forceDelete": force_delete,
            **{name: unsupported for name in UNSUPPORTED}}
