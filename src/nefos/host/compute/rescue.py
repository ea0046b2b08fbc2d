"""Rescue and unrescue on the compute host (Nova's ``ComputeManager.rescue_instance`` /
``unrescue_instance``; the API's side is ``nefos.control.compute.rescue``).

The guest is powered off, then the driver boots it from the rescue image (the one given, else the
server's own image) with the server's disk attached after it; the server becomes RESCUED with the
guest's power state. Unrescue brings the original guest back and the server ACTIVE (even one
rescued while stopped, as Nova). A driver failure puts the server in ERROR with a fault, as in
Nova. The power-state sync leaves RESCUED servers alone (``power_sync.IGNORED_VM_STATES``).
"""

from __future__ import annotations

from nefos import exceptions
from nefos.host.compute import snapshots
from nefos.model import states
from nefos.timeutils import utcnow


class InstanceNotRescuable(exceptions.Invalid):
    message = "Instance %(instance_id)s cannot be rescued: %(reason)s"


async def rescue_instance(manager, ctx, uuid: str, rescue_password: str | None, rescue_image_ref: str | None) -> None:
    async def op(instance):
        image_id = (rescue_image_ref or (instance.get("system_metadata") or {}).get("image_base_image_ref")
                    or instance.get("image_ref"))
        image = await snapshots.image_meta(manager, ctx, image_id)
        if instance["power_state"] in (states.RUNNING, states.PAUSED_POWER, states.SUSPENDED_POWER):
            await manager.driver.power_off(instance, manager.rt.cfg.shutdown_timeout)
        block_device_info = await manager.prep_block_device(instance)
        try:
            await manager.driver.rescue(ctx, instance, instance.get("network_info") or [], image,
                                        rescue_password, block_device_info)
        except NotImplementedError:
            raise InstanceNotRescuable(instance_id=uuid, reason="the hypervisor driver has no rescue") from None
        except Exception as exc:  # the fault says why, as Nova's
            raise InstanceNotRescuable(instance_id=uuid, reason=f"Driver Error: {exc}") from exc
        return {"launched_at": utcnow().isoformat()}

    await manager.power_op(ctx, uuid, event="compute_rescue_instance", step="rescue.done",
                            final_vm_state=states.RESCUED, notification="rescue", op=op,
                            error_vm_state=states.ERROR)


async def unrescue_instance(manager, ctx, uuid: str) -> None:
    async def op(instance):
        await manager.driver.unrescue(ctx, instance, instance.get("network_info") or [])

    await manager.power_op(ctx, uuid, event="compute_unrescue_instance", step="unrescue.done",
                            final_vm_state=states.ACTIVE, notification="unrescue", op=op,
                            error_vm_state=states.ERROR)
