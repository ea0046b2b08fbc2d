"""Rescue and unrescue, the API side (Nova's ``rescue``/``unrescue`` in ``nova.compute.api``; the
host's side is ``nefos.host.compute.rescue``).

Rescue is refused (409) unless the server is unlocked, ACTIVE, STOPPED or ERROR with no task; a
``rescue_image_ref`` must be an image the caller can see and not a volume snapshot (400
otherwise, Nova's ``UnsupportedRescueImage``). task_state ``rescuing`` is set, the ``rescue``
action recorded and the host told. Unrescue only from RESCUED (409 otherwise), task_state
``unrescuing``, action ``unrescue``.
"""

from __future__ import annotations

from nefos import exceptions
from nefos.objects import actions
from nefos.model import states

RESCUE_VM_STATES = [states.ACTIVE, states.STOPPED, states.ERROR]
UNRESCUE_VM_STATES = [states.RESCUED]


class UnsupportedRescueImage(exceptions.Invalid):
    message = "Requested rescue image '%(image)s' is not supported"


def _check_state(instance: dict, action: str, vm_ok: list) -> None:
    """Nova's ``check_instance_state`` (vm_state in ``vm_ok``, no task), before anything else is read."""
    if instance["vm_state"] not in vm_ok:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                              attr="vm_state", state=instance["vm_state"])
    if instance["task_state"] is not None:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                              attr="task_state", state=instance["task_state"])


async def request_rescue(compute_api, ctx, uuid: str, *, password: str | None,
                         rescue_image_ref: str | None) -> None:
    instance = await compute_api.get(ctx, uuid)
    compute_api.check_lock(ctx, instance)
    _check_state(instance, actions.RESCUE, RESCUE_VM_STATES)
    if rescue_image_ref:
        try:
            image = await compute_api.image_api.get(ctx, rescue_image_ref)
        except exceptions.NotFound:
            raise UnsupportedRescueImage(image=rescue_image_ref) from None
        if (image.get("properties") or {}).get("img_block_device_mapping"):
            raise UnsupportedRescueImage(image=rescue_image_ref)  # Nova cannot rescue from a volume snapshot
    async with compute_api.guarded_action(ctx, uuid, actions.RESCUE, RESCUE_VM_STATES, [None],
                                   states.RESCUING) as instance:
        await compute_api.compute_rpcapi.rescue_instance(ctx, instance["host"], uuid, password,
                                                         rescue_image_ref)


async def request_unrescue(compute_api, ctx, uuid: str) -> None:
    instance = await compute_api.get(ctx, uuid)
    compute_api.check_lock(ctx, instance)
    _check_state(instance, actions.UNRESCUE, UNRESCUE_VM_STATES)
    async with compute_api.guarded_action(ctx, uuid, actions.UNRESCUE, UNRESCUE_VM_STATES, [None],
                                   states.UNRESCUING) as instance:
        await compute_api.compute_rpcapi.unrescue_instance(ctx, instance["host"], uuid)
