"""Rebuild on the compute host (Nova's ``rebuild_instance``): the guest is destroyed and spawned
again from the server's (new) image, keeping its ports, IPs and claim.

task_state rebuilding -> rebuild_block_device_mapping (guest destroyed) -> rebuild_spawning (new
guest) -> None, each save a compare-and-swap so a delete meanwhile wins. A running server waits for
its VIFs' network-vif-plugged again (they are re-plugged); a server that was stopped is rebuilt
stopped (nothing is plugged, nothing waited for); a server in ERROR comes back ACTIVE. A failure
puts the server in ERROR with a fault, as in Nova.
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.host.compute import image_trust, snapshots
from nefos.model import states
from nefos.model.state_machine import step_save
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

async def rebuild_instance(manager, ctx, uuid: str, image_id: str, was_stopped: bool) -> None:
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            return
        try:
            async with manager.conductor.step(ctx, uuid, "compute_rebuild_instance", manager.host):
                await manager.notify(ctx, instance, "instance.rebuild.start")
                image = await snapshots.image_meta(manager, ctx, image_id)
                image_trust.check_trusted_certs(instance)
                instance = await manager.conductor.instance_save(None, uuid,
                                                                 **step_save("rebuild.block_device_mapping"))
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await manager.driver.destroy(ctx, instance, instance.get("network_info"))
                block_device_info = await manager.prep_block_device(instance)
                instance = await manager.conductor.instance_save(None, uuid, **step_save("rebuild.spawning"))
                if was_stopped:
                    await manager.driver.spawn(ctx, instance, image, instance.get("network_info") or [],
                                               block_device_info, power_on=False)
                else:
                    await manager.instance_events.replug(
                        ctx, instance, lambda nw: manager.driver.spawn(ctx, instance, image, nw, block_device_info),
                        what="rebuild")
                power_state = (await manager.driver.get_info(instance))["power_state"]
                instance = await manager.conductor.instance_save(None, uuid, **step_save(
                    "rebuild.done", vm_state=states.STOPPED if was_stopped else states.ACTIVE,
                    power_state=power_state, launched_at=utcnow().isoformat()))
                await manager.notify(ctx, instance, "instance.rebuild.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            return  # deleted meanwhile: the delete cleans up
        except Exception as exc:
            LOG.error("instance %s: rebuild failed: %s", uuid, exc)
            with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                await manager.conductor.save_with_fault(None, uuid, exc=exc, host=manager.host,
                                                        details="".join(traceback.format_exception(exc)),
                                                        **step_save("rebuild.failed", vm_state=states.ERROR))
        finally:
            await manager.conductor.action_finish(ctx, uuid)
