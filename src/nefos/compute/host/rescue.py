"""Rescue and unrescue (Nova's ``rescue``/``unrescue`` in ``nova.compute.api`` and the manager).

API side: rescue is refused (409) unless the server is unlocked, ACTIVE, STOPPED or ERROR with no
task; a ``rescue_image_ref`` must be an image the caller can see and not a volume snapshot (400
otherwise, Nova's ``UnsupportedRescueImage``). task_state ``rescuing`` is set, the ``rescue``
action recorded and the host told. Unrescue only from RESCUED (409 otherwise), task_state
``unrescuing``, action ``unrescue``.

Host side: the guest is powered off, then the driver boots it from the rescue image (the one given,
else the server's own image) with the server's disk attached after it; the server becomes RESCUED
with the guest's power state. Unrescue brings the original guest back and the server ACTIVE (even
one rescued while stopped, as Nova). A driver failure puts the server in ERROR with a fault, as in
Nova. The power-state sync leaves RESCUED servers alone (``power_sync.IGNORED_VM_STATES``).
"""

from __future__ import annotations

from nefos import exceptions
from nefos.compute.host import snapshots
from nefos.db.models import utcnow
from nefos.objects import actions, states

RESCUE_VM_STATES = [states.ACTIVE, states.STOPPED, states.ERROR]
UNRESCUE_VM_STATES = [states.RESCUED]


class UnsupportedRescueImage(exceptions.Invalid):
    message = "Requested rescue image '%(image)s' is not supported"


class InstanceNotRescuable(exceptions.Invalid):
    message = "Instance %(instance_id)s cannot be rescued: %(reason)s"


def _check_state(instance: dict, action: str, vm_ok: list) -> None:
    """Nova's ``check_instance_state`` (vm_state in ``vm_ok``, no task), before anything else is read."""
    if instance["vm_state"] not in vm_ok:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                              attr="vm_state", state=instance["vm_state"])
    if instance["task_state"] is not None:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=instance["uuid"],
                                              attr="task_state", state=instance["task_state"])


async def request_rescue(compute_api, ctx, uuid: str, *, password: str,
                         rescue_image_ref: str | None) -> None:
    instance = await compute_api.get(ctx, uuid)
    compute_api._check_lock(ctx, instance)
    _check_state(instance, actions.RESCUE, RESCUE_VM_STATES)
    if rescue_image_ref:
        try:
            image = await compute_api.image_api.get(ctx, rescue_image_ref)
        except exceptions.NotFound:
            raise UnsupportedRescueImage(image=rescue_image_ref) from None
        if (image.get("properties") or {}).get("img_block_device_mapping"):
            raise UnsupportedRescueImage(image=rescue_image_ref)  # Nova cannot rescue from a volume snapshot
    async with compute_api._action(ctx, uuid, actions.RESCUE, RESCUE_VM_STATES, [None],
                                   states.RESCUING) as instance:
        await compute_api.compute_rpcapi.rescue_instance(ctx, instance["host"], uuid, password,
                                                         rescue_image_ref)


async def request_unrescue(compute_api, ctx, uuid: str) -> None:
    instance = await compute_api.get(ctx, uuid)
    compute_api._check_lock(ctx, instance)
    _check_state(instance, actions.UNRESCUE, UNRESCUE_VM_STATES)
    async with compute_api._action(ctx, uuid, actions.UNRESCUE, UNRESCUE_VM_STATES, [None],
                                   states.UNRESCUING) as instance:
        await compute_api.compute_rpcapi.unrescue_instance(ctx, instance["host"], uuid)


async def rescue_instance(manager, ctx, uuid: str, rescue_password: str, rescue_image_ref: str | None) -> None:
    async def op(instance):
        image_id = (rescue_image_ref or (instance.get("system_metadata") or {}).get("image_base_image_ref")
                    or instance.get("image_ref"))
        image = await snapshots.image_meta(manager, ctx, image_id)
        if instance["power_state"] in (states.RUNNING, states.PAUSED_POWER, states.SUSPENDED_POWER):
            await manager.driver.power_off(instance, manager.rt.cfg.shutdown_timeout)
        block_device_info = await manager._prep_block_device(instance)
        try:
            await manager.driver.rescue(ctx, instance, instance.get("network_info") or [], image,
                                        rescue_password, block_device_info)
        except NotImplementedError:
            raise InstanceNotRescuable(instance_id=uuid, reason="the hypervisor driver has no rescue") from None
        except Exception as exc:  # the fault says why, as Nova's
            raise InstanceNotRescuable(instance_id=uuid, reason=f"Driver Error: {exc}") from exc
        return {"launched_at": utcnow().isoformat()}

    await manager._power_op(ctx, uuid, event="compute_rescue_instance", expected=[states.RESCUING],
                            final_vm_state=states.RESCUED, notification="rescue", op=op,
                            error_vm_state=states.ERROR)


async def unrescue_instance(manager, ctx, uuid: str) -> None:
    async def op(instance):
        await manager.driver.unrescue(ctx, instance, instance.get("network_info") or [])

    await manager._power_op(ctx, uuid, event="compute_unrescue_instance", expected=[states.UNRESCUING],
                            final_vm_state=states.ACTIVE, notification="unrescue", op=op,
                            error_vm_state=states.ERROR)
