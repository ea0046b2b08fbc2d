"""Shelve, shelve offload and unshelve on the compute host (Nova's shelve semantics).

* shelve: the guest is powered off and its disk saved as the image
  ``<name>-shelved``; the server is SHELVED on its host (its resources still
  claimed). With ``shelved_offload_time = 0`` (Nova's default) it is offloaded at
  once; with -1 never; otherwise only by ``shelveOffload``.
* offload: the guest is destroyed, its ports unbound, its claim released; the
  server is SHELVED_OFFLOADED with no host.
* unshelve of a SHELVED server: the guest is started again (re-plugging its VIFs,
  waiting for network-vif-plugged) and the image deleted. Of a SHELVED_OFFLOADED
  server: the conductor schedules it (a new claim), and the chosen host binds its
  ports, spawns the guest from the shelved image and deletes the image; a failure
  puts it back to SHELVED_OFFLOADED with a fault, releasing what it took.

The image's id and when/where the server was shelved are in its system metadata
(``shelved_image_id``, ``shelved_at``, ``shelved_host``), as in Nova.
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.host.compute import snapshots
from nefos.model import states
from nefos.model.state_machine import expects, leaves, step_save
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

SHELVE_KEYS = ("shelved_image_id", "shelved_at", "shelved_host")


def without_shelve_keys(instance: dict) -> dict:
    return {k: v for k, v in (instance.get("system_metadata") or {}).items() if k not in SHELVE_KEYS}


async def shelve_instance(manager, ctx, uuid: str, image_id: str) -> None:
    offload_at_once = manager.rt.cfg.shelved_offload_time == 0

    async def op(instance):
        if instance["power_state"] in (states.RUNNING, states.PAUSED_POWER, states.SUSPENDED_POWER):
            await manager.driver.power_off(instance, manager.rt.cfg.shutdown_timeout)
        await snapshots.snapshot_to_image(manager, ctx, instance, image_id, operation="shelve")
        metadata = dict(instance.get("system_metadata") or {}, shelved_image_id=image_id,
                        shelved_at=utcnow().isoformat(), shelved_host=manager.host)
        updates = {"system_metadata": metadata}
        if offload_at_once:
            # SHELVED and already offloading in the same write, as Nova: no moment in which the
            # server looks SHELVED and idle while its host is about to offload it.
            updates["task_state"] = leaves("shelve.offloading_at_once")
        return updates

    await manager.power_op(ctx, uuid, event="compute_shelve_instance",
                            step="shelve.done", final_vm_state=states.SHELVED,
                            notification="shelve", op=op, starts_in=expects("shelve.pending_upload"))
    if offload_at_once:
        # Does nothing unless the shelve above ended in SHELVING_OFFLOADING.
        await shelve_offload_instance(manager, ctx, uuid)


async def shelve_offload_instance(manager, ctx, uuid: str) -> None:
    async def op(instance):
        await manager.driver.destroy(ctx, instance, instance.get("network_info"))
        await manager.network_api.setup_instance_network_on_host(ctx, instance, None)
        await manager.conductor.allocation_release(None, uuid)
        return {"host": None, "node": None, "power_state": states.NOSTATE}

    await manager.power_op(ctx, uuid, event="compute_shelve_offload_instance",
                            step="shelveOffload.done", final_vm_state=states.SHELVED_OFFLOADED,
                            notification="shelve_offload", op=op)


async def unshelve_instance(manager, ctx, uuid: str, node: str | None = None) -> None:
    """Unshelve on this host: start the shelved guest, or (``node`` given) spawn the offloaded one."""
    if node is None:
        async def start(instance):
            await manager.instance_events.replug(
                ctx, instance, lambda nw: manager.driver.power_on(ctx, instance, nw), what="unshelve")
            return {"system_metadata": without_shelve_keys(instance)}

        image_id = await _shelved_image_id(manager, uuid)
        await manager.power_op(ctx, uuid, event="compute_unshelve_instance", step="unshelve.done",
                                final_vm_state=states.ACTIVE, notification="unshelve", op=start)
        await _delete_shelved_image(manager, ctx, uuid, image_id)
        return
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            await manager.conductor.allocation_release(None, uuid)
            return
        if instance["task_state"] not in expects("unshelve.done"):
            # Done or given up meanwhile (compute/host/deadlines.py): the claim is not this request's.
            await manager.conductor.action_finish(ctx, uuid, message="Error", unless_finished=True)
            return
        image_id = (instance.get("system_metadata") or {}).get("shelved_image_id")
        try:
            async with manager.conductor.step(ctx, uuid, "compute_unshelve_instance", manager.host):
                await manager.notify(ctx, instance, "instance.unshelve.start")
                await _spawn_offloaded(manager, ctx, instance, image_id, node)
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            await _undo_unshelve(manager, ctx, uuid)  # deleted meanwhile: the delete finishes the job
            return
        except Exception as exc:
            LOG.error("instance %s: unshelve on %s failed: %s", uuid, manager.host, exc)
            await _undo_unshelve(manager, ctx, uuid)
            with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                await manager.conductor.save_with_fault(
                    None, uuid, exc=exc, host=manager.host, details="".join(traceback.format_exception(exc)),
                    **step_save("unshelve.failed", vm_state=states.SHELVED_OFFLOADED, host=None, node=None,
                                network_info=[]))
            return
        finally:
            await manager.conductor.action_finish(ctx, uuid)
    await _delete_shelved_image(manager, ctx, uuid, image_id)


async def _spawn_offloaded(manager, ctx, instance: dict, image_id: str | None, node: str) -> None:
    uuid = instance["uuid"]
    if not image_id:
        raise exceptions.ImageNotFound(image_id="(the shelved image of this server)")
    await manager.resource_tracker.instance_claim(instance, node)
    image = await snapshots.image_meta(manager, ctx, image_id)
    await manager.instance_events.begin_operation(uuid)  # before the ports are bound
    network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
    instance = await manager.conductor.instance_save(None, uuid, **step_save("unshelve.networked",
                                                                             network_info=network_info))
    block_device_info = await manager.prep_block_device(instance)
    await manager.instance_events.spawn(ctx, instance, image, network_info, block_device_info)
    power_state = (await manager.driver.get_info(instance))["power_state"]
    instance = await manager.conductor.instance_save(None, uuid, **step_save(
        "unshelve.done", vm_state=states.ACTIVE, power_state=power_state,
        system_metadata=without_shelve_keys(instance),
        launched_at=utcnow().isoformat()))  # as Nova's _update_instance_after_spawn
    await manager.notify(ctx, instance, "instance.unshelve.end")


async def _undo_unshelve(manager, ctx, uuid: str) -> None:
    """Release what a failed or abandoned unshelve took on this host: guest, port bindings, claim."""
    try:
        instance = await manager.conductor.instance_get(None, uuid, read_deleted=True)
    except exceptions.InstanceNotFound:
        instance = {"uuid": uuid, "network_info": []}
    with contextlib.suppress(exceptions.InstanceNotFound):
        await manager.driver.destroy(ctx, instance, instance.get("network_info"))
    if not instance.get("deleted"):
        with contextlib.suppress(Exception):
            await manager.network_api.setup_instance_network_on_host(ctx, instance, None)
    await manager.conductor.allocation_release(None, uuid)


async def _shelved_image_id(manager, uuid: str) -> str | None:
    try:
        instance = await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        return None
    return (instance.get("system_metadata") or {}).get("shelved_image_id")


async def _delete_shelved_image(manager, ctx, uuid: str, image_id: str | None) -> None:
    """After a successful unshelve the shelved image has served its purpose (Nova deletes it)."""
    try:
        instance = await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        return
    if image_id and instance["vm_state"] == states.ACTIVE:
        await manager.image_api.delete(ctx.elevated(), image_id)
