"""Evacuation on the compute hosts (Nova's ``rebuild_instance`` with ``recreate`` on the destination,
and ``_destroy_evacuated_instances`` on the source when it comes back).

On the destination (``rebuild_on_destination``, cast by the conductor with the migration):

==============================  ===============================================  ==============
step                            what                                             migration
==============================  ===============================================  ==============
the claim                       the migration's claim must be on this node       pre-migrating
rebuild_block_device_mapping    block devices prepared (the source's disks are
                                out of reach: the guest is made from the image)
rebuild_spawning                the server's ports bound to this host (same
                                ports, same fixed IPs); the guest spawned from
                                the image: running (network-vif-plugged awaited)
                                or, for a STOPPED server or from 2.95, stopped
done, in ONE transaction        host and node are this host's, the source's      done
                                claim released, the migration's claim becomes
                                the server's; ACTIVE (STOPPED), task_state None
==============================  ===============================================  ==============

Each step is a compare-and-swap on the previous task_state, so a delete meanwhile wins (the guest
made here and the migration's claim are dropped). A failure is Nova's: the server in ERROR with a
fault, still on its source host with its source claim; the guest made here destroyed, the
migration's claim released, the ports bound back to the source, the migration ``failed``.

On the source, at ``init_host`` (``destroy_evacuated_guests``): a guest the driver still has whose
instance now lives on another host is destroyed only when an evacuation of it from this host is
recorded (type ``evacuation``, status ``accepted``, ``pre-migrating`` or ``done``, Nova's filter);
a ``done`` one becomes ``completed``. A guest whose instance still names this host is never
destroyed (an evacuation still under way leaves it to the destination's outcome), nor one without
such a record: it is left, and logged.
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.compute import snapshots
from nefos.compute.evacuate_api import (EVACUATION, EVACUATION_TASK_STATES, IN_PROGRESS_STATUSES, evacuation_of,
                                        with_migration)
from nefos.context import admin_context
from nefos.db.models import utcnow
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, states

LOG = logging.getLogger(__name__)

REBUILD_EVENT = "compute_rebuild_instance"  # Nova's event name, for a rebuild and an evacuation
# Nova's _destroy_evacuated_instances: evacuations from this host that prove its guest is elsewhere.
PROVING_STATUSES = ("accepted", "pre-migrating", "done")


class EvacuationClaimMissing(exceptions.NefosError):
    message = "No resource claim for evacuation %(migration)s on %(host)s."


# Destination ---------------------------------------------------------------------------------------
async def rebuild_on_destination(manager, ctx, uuid: str, image_id: str, was_stopped: bool,
                                 migration: dict) -> None:
    db = manager.rt.db
    stopped = was_stopped or migration.get("target_state") == states.STOPPED
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(db, uuid)
        except exceptions.InstanceNotFound:
            await _drop_destination(manager, ctx, None, migration)
            return
        failed = True
        try:
            async with actions.step(db, ctx, uuid, REBUILD_EVENT, manager.host):
                await _rebuild(manager, ctx, instance, image_id, stopped, migration)
            failed = False
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            LOG.info("instance %s: deleted (or taken over) during its evacuation to %s", uuid, manager.host)
            await _drop_destination(manager, ctx, instance, migration)
        except Exception as exc:
            LOG.error("instance %s: evacuation to %s failed: %s", uuid, manager.host, exc)
            await _fail(manager, ctx, instance, migration, exc)
        finally:
            await actions.finish_action(db, ctx, uuid, message="Error" if failed else None)


async def _rebuild(manager, ctx, instance: dict, image_id: str, stopped: bool, migration: dict) -> None:
    db, uuid = manager.rt.db, instance["uuid"]
    current = evacuation_of(instance)
    if current is None or current["uuid"] != migration["uuid"]:
        raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=list(EVACUATION_TASK_STATES),
                                                  actual=instance["task_state"])
    claim = await allocations.get(db, migration["uuid"])
    if claim is None or claim["compute_node_id"] != manager.resource_tracker.node_ids.get(migration["dest_node"]):
        raise EvacuationClaimMissing(migration=migration["uuid"], host=manager.host)
    await migrations_obj.set_status(db, migration["uuid"], "pre-migrating")
    await manager._notify(ctx, instance, "instance.rebuild.start")
    image = await snapshots.image_meta(manager, ctx, image_id)
    instance = await instance_obj.save(db, uuid, {"task_state": states.REBUILD_BLOCK_DEVICE_MAPPING},
                                       expected_task_state=[states.REBUILDING])
    block_device_info = await manager._prep_block_device(instance)
    instance = await instance_obj.save(db, uuid, {"task_state": states.REBUILD_SPAWNING},
                                       expected_task_state=[states.REBUILD_BLOCK_DEVICE_MAPPING])
    # The same ports (and fixed IPs), bound to this host now (Nova's setup_instance_network_on_host).
    network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
    instance = await instance_obj.save(db, uuid, {"network_info": network_info},
                                       expected_task_state=[states.REBUILD_SPAWNING])
    if stopped:
        await manager.driver.spawn(ctx, instance, image, network_info, block_device_info, power_on=False)
    else:
        await manager.instance_events.replug(
            ctx, instance, lambda nw: manager.driver.spawn(ctx, instance, image, nw, block_device_info),
            what="evacuation")
    power_state = (await manager.driver.get_info(instance))["power_state"]
    async with db.transaction() as s:
        instance = await instance_obj.save(
            db, uuid, {"host": manager.host, "node": migration["dest_node"],
                       "vm_state": states.STOPPED if stopped else states.ACTIVE, "task_state": None,
                       "power_state": power_state, "launched_at": utcnow().isoformat(),
                       "system_metadata": with_migration(instance, None)},
            expected_task_state=[states.REBUILD_SPAWNING], session=s)
        # The source's claim is given back; the migration's claim here becomes the server's.
        await allocations.release(db, uuid, session=s)
        await allocations.transfer(s, migration["uuid"], uuid)
        await migrations_obj.set_status(db, migration["uuid"], "done", session=s)
    LOG.info("instance %s: evacuated from %s to %s", uuid, migration["source_compute"], manager.host)
    await manager._notify(ctx, instance, "instance.rebuild.end")


async def _drop_destination(manager, ctx, instance: dict | None, migration: dict) -> None:
    """What this host made for the evacuation goes: its guest, its claim; the migration ``failed``."""
    if instance is not None:
        with contextlib.suppress(Exception):
            await manager.driver.destroy(ctx, instance, None)
    await allocations.release(manager.rt.db, migration["uuid"])
    await migrations_obj.set_status(manager.rt.db, migration["uuid"], "failed")


async def _fail(manager, ctx, instance: dict, migration: dict, exc: BaseException) -> None:
    db, uuid = manager.rt.db, instance["uuid"]
    await _drop_destination(manager, ctx, instance, migration)
    try:  # the ports go back to the host the server still belongs to
        await manager.network_api.setup_instance_network_on_host(ctx, instance, instance.get("host"))
    except Exception as port_exc:
        LOG.warning("instance %s: its ports were not bound back to %s: %s", uuid, instance.get("host"), port_exc)
    try:
        current = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        return
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await instance_obj.save_with_fault(
            db, uuid, {"vm_state": states.ERROR, "task_state": None,
                       "system_metadata": with_migration(current, None)}, exc,
            host=manager.host, details="".join(traceback.format_exception(exc)),
            expected_task_state=list(EVACUATION_TASK_STATES))
    await manager._notify(ctx, current, "instance.rebuild.error")


# Source, when it comes back ------------------------------------------------------------------------
async def _evacuations_from(db, host: str, statuses: tuple[str, ...]) -> dict[str, dict]:
    """This host's evacuations in ``statuses``, by instance (the newest of each)."""
    rows = await migrations_obj.by_host_and_type(db, EVACUATION, statuses, source_compute=host)
    return {row["instance_uuid"]: row for row in rows}


async def fail_interrupted_evacuations(manager) -> set[str]:
    """Evacuations to this host that a restart of it interrupted (it had taken them: pre-migrating)
    fail as any other failure here: ERROR on the source, this host's guest and claim dropped, the
    ports bound back. Returns their instances."""
    failed: set[str] = set()
    db = manager.rt.db
    for migration in await migrations_obj.by_host_and_type(db, EVACUATION, ("pre-migrating",),
                                                           dest_compute=manager.host):
        uuid = migration["instance_uuid"]
        async with manager.instance_lock(uuid):
            try:
                instance = await instance_obj.get(db, uuid)
            except exceptions.InstanceNotFound:
                continue
            current = evacuation_of(instance)
            if current is None or current["uuid"] != migration["uuid"]:
                continue
            exc = exceptions.NefosError(f"the evacuation was interrupted by a restart of compute host {manager.host}")
            LOG.warning("instance %s: %s", uuid, exc)
            ctx = await _action_context(db, uuid)
            await _fail(manager, ctx, instance, current, exc)
            await actions.finish_action(db, ctx, uuid, message="Error")
            failed.add(uuid)
    return failed


async def _action_context(db, uuid: str):
    from nefos.compute.init_host import action_context
    return await action_context(db, uuid, "evacuate")


async def evacuations_in_progress(db, host: str) -> set[str]:
    """Instances being evacuated from this host now: the destination decides their fate, so the
    source's start-up recovery leaves them alone."""
    return set(await _evacuations_from(db, host, IN_PROGRESS_STATUSES))


async def destroy_evacuated_guest(manager, instance: dict) -> bool:
    """``instance`` lives on another host and its guest is still here: destroy the guest when an
    evacuation from this host proves it moved (and complete that migration); else leave it.
    Returns whether it was destroyed."""
    uuid = instance["uuid"]
    evacuation = (await _evacuations_from(manager.rt.db, manager.host, PROVING_STATUSES)).get(uuid)
    if evacuation is None or instance.get("host") == manager.host:
        LOG.warning("init_host on %s: guest %s belongs to an instance on %s, and no evacuation from this "
                    "host is recorded; leaving it", manager.host, uuid, instance.get("host"))
        return False
    LOG.warning("init_host on %s: instance %s was evacuated to %s (migration %s); destroying the local guest",
                manager.host, uuid, instance.get("host"), evacuation["uuid"])
    # Only the local guest goes: the ports and the claim are the destination's now.
    with contextlib.suppress(exceptions.InstanceNotFound):
        await manager.driver.destroy(admin_context(), instance, None)
    if evacuation["status"] == "done":
        await migrations_obj.set_status(manager.rt.db, evacuation["uuid"], "completed")
    return True


async def complete_evacuations(manager) -> None:
    """Evacuations from this host that are done and left no guest here are completed too (Nova
    completes every one it finds at start)."""
    for uuid, evacuation in (await _evacuations_from(manager.rt.db, manager.host, ("done",))).items():
        try:
            instance = await instance_obj.get(manager.rt.db, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            continue
        if instance.get("host") != manager.host:
            await migrations_obj.set_status(manager.rt.db, evacuation["uuid"], "completed")
