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
                                ports, same fixed IPs), the new password (if
                                any) kept; the guest spawned from
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

On the source, at ``init_host`` (``destroy_evacuated_guest``): a guest the driver still has whose
instance now lives on another host is destroyed only when an evacuation of it from this host is
recorded (type ``evacuation``, status ``accepted``, ``pre-migrating`` or ``done``, Nova's filter);
a ``done`` one becomes ``completed``. A guest whose instance still names this host is never
destroyed (an evacuation still under way leaves it to the destination's outcome), nor one without
such a record: it is left, and logged. An evacuation to this host that a restart of it interrupted
(pre-migrating) fails as any other failure here.

Nova does this at start-up only. Nefos does it also when the host comes back from a partition
(``init_host.after_return``: its first report that gets through after none did for at least
``service_down_time``): a partitioned host keeps its process, so no start-up would ever come, and
the guest evacuated away from it would go on running beside its copy on the destination, with
the same MAC and fixed IP addresses. The same rule holds there: only with proof, and a guest of
an evacuation still under way is checked again after each report until that evacuation ends.

Every read and write goes through the conductor (``nefos.control.conductor.host_surface``, and
``nefos.control.conductor.migration_surface`` for the ones made together).
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.host.compute import snapshots
from nefos.host.compute.unfinished_actions import action_context
from nefos.context import admin_context
from nefos.model import admin_password, states
from nefos.model.migration_state import (EVACUATE, EVACUATION, EVACUATION_IN_PROGRESS, EVACUATION_TASK_STATES,
                                           evacuation_of, with_migration)
from nefos.model.state_machine import expects, leaves, step_save
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

REBUILD_EVENT = "compute_rebuild_instance"  # Nova's event name, for a rebuild and an evacuation
# Nova's _destroy_evacuated_instances: evacuations from this host that prove its guest is elsewhere.
PROVING_STATUSES = ("accepted", "pre-migrating", "done")


# Destination ---------------------------------------------------------------------------------------
async def rebuild_on_destination(manager, ctx, uuid: str, image_id: str, was_stopped: bool,
                                 migration: dict, new_pass: str | None = None) -> None:
    stopped = was_stopped or migration.get("target_state") == states.STOPPED
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            await _drop_destination(manager, ctx, None, migration)
            return
        failed = True
        try:
            async with manager.conductor.step(ctx, uuid, REBUILD_EVENT, manager.host):
                await _rebuild(manager, ctx, instance, image_id, stopped, migration, new_pass)
            failed = False
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            LOG.info("instance %s: deleted (or taken over) during its evacuation to %s", uuid, manager.host)
            await _drop_destination(manager, ctx, instance, migration)
        except Exception as exc:
            LOG.error("instance %s: evacuation to %s failed: %s", uuid, manager.host, exc)
            await _fail(manager, ctx, instance, migration, exc)
        finally:
            await manager.conductor.action_finish(ctx, uuid, message="Error" if failed else None)


async def _rebuild(manager, ctx, instance: dict, image_id: str, stopped: bool, migration: dict,
                   new_pass: str | None) -> None:
    conductor, uuid = manager.conductor, instance["uuid"]
    current = evacuation_of(instance)
    if current is None or current["uuid"] != migration["uuid"]:
        raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=expects("rebuild.failed"),
                                                  actual=instance["task_state"])
    await manager.resource_tracker.move_claim(migration)
    await conductor.migration_set_status(None, migration["uuid"], "pre-migrating")
    await manager.notify(ctx, instance, "instance.rebuild.start")
    image = await snapshots.image_meta(manager, ctx, image_id)
    instance = await conductor.instance_save(None, uuid, **step_save("rebuild.block_device_mapping"))
    block_device_info = await manager.prep_block_device(instance)
    instance = await conductor.instance_save(None, uuid, **step_save("rebuild.spawning"))
    # The same ports (and fixed IPs), bound to this host now (Nova's setup_instance_network_on_host).
    network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
    updates: dict = {"network_info": network_info}
    if new_pass is not None:  # the config drive spawned below and the metadata service serve it
        updates["system_metadata"] = admin_password.kept(instance.get("system_metadata"), new_pass)
    instance = await conductor.instance_save(None, uuid, **step_save("rebuild.networked", **updates))
    if stopped:
        await manager.driver.spawn(ctx, instance, image, network_info, block_device_info, power_on=False)
    else:
        await manager.instance_events.replug(
            ctx, instance, lambda nw: manager.driver.spawn(ctx, instance, image, nw, block_device_info),
            what="evacuation")
    power_state = (await manager.driver.get_info(instance))["power_state"]
    # In one transaction: the server is this host's, the source's claim released and the migration's
    # claim here the server's, the migration done.
    instance = await conductor.evacuation_done(
        None, uuid, {"host": manager.host, "node": migration["dest_node"],
                     "vm_state": states.STOPPED if stopped else states.ACTIVE, "task_state": leaves("rebuild.done"),
                     "power_state": power_state, "launched_at": utcnow().isoformat(),
                     "system_metadata": with_migration(instance, None)},
        migration["uuid"], expected_task_state=expects("rebuild.done"))
    LOG.info("instance %s: evacuated from %s to %s", uuid, migration["source_compute"], manager.host)
    await manager.notify(ctx, instance, "instance.rebuild.end")


async def _drop_destination(manager, ctx, instance: dict | None, migration: dict) -> None:
    """What this host made for the evacuation goes: its guest, its claim; the migration ``failed``."""
    if instance is not None:
        with contextlib.suppress(Exception):
            await manager.driver.destroy(ctx, instance, None)
    await manager.conductor.allocation_release(None, migration["uuid"])
    await manager.conductor.migration_set_status(None, migration["uuid"], "failed")


async def _fail(manager, ctx, instance: dict, migration: dict, exc: BaseException) -> None:
    uuid = instance["uuid"]
    await _drop_destination(manager, ctx, instance, migration)
    try:  # the ports go back to the host the server still belongs to
        await manager.network_api.setup_instance_network_on_host(ctx, instance, instance.get("host"))
    except Exception as port_exc:
        LOG.warning("instance %s: its ports were not bound back to %s: %s", uuid, instance.get("host"), port_exc)
    try:
        current = await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        return
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await manager.conductor.save_with_fault(
            None, uuid, exc=exc, host=manager.host, details="".join(traceback.format_exception(exc)),
            **step_save("rebuild.failed", vm_state=states.ERROR, system_metadata=with_migration(current, None)))
    await manager.notify(ctx, current, "instance.rebuild.error")


async def fail_interrupted_evacuations(manager) -> set[str]:
    """Evacuations to this host that a restart of it interrupted (it had taken them: pre-migrating)
    fail as any other failure here: ERROR on the source, this host's guest and claim dropped, the
    ports bound back. Returns their instances."""
    failed: set[str] = set()
    for migration in await manager.conductor.migrations_of_host(None, EVACUATION, ["pre-migrating"],
                                                                dest_compute=manager.host):
        uuid = migration["instance_uuid"]
        async with manager.instance_lock(uuid):
            try:
                instance = await manager.conductor.instance_get(None, uuid)
            except exceptions.InstanceNotFound:
                continue
            current = evacuation_of(instance)
            if current is None or current["uuid"] != migration["uuid"]:
                continue
            exc = exceptions.NefosError(f"the evacuation was interrupted by a restart of compute host {manager.host}")
            LOG.warning("instance %s: %s", uuid, exc)
            ctx = await action_context(manager, uuid, EVACUATE)
            await _fail(manager, ctx, instance, current, exc)
            await manager.conductor.action_finish(ctx, uuid, message="Error")
            failed.add(uuid)
    return failed


# Source, when it comes back ------------------------------------------------------------------------
async def _evacuations_from(manager, statuses: tuple[str, ...]) -> dict[str, dict]:
    """This host's evacuations in ``statuses``, by instance (the newest of each)."""
    rows = await manager.conductor.migrations_of_host(None, EVACUATION, list(statuses), source_compute=manager.host)
    return {row["instance_uuid"]: row for row in rows}


async def evacuations_in_progress(manager) -> set[str]:
    """Instances being evacuated from this host now: the destination decides their fate, so the
    source's start-up recovery leaves them alone."""
    return set(await _evacuations_from(manager, EVACUATION_IN_PROGRESS))


async def destroy_evacuated_guest(manager, instance: dict, when: str) -> bool:
    """``instance`` lives on another host and its guest is still here: destroy the guest when an
    evacuation from this host proves it moved (and complete that migration); else leave it.
    Returns whether it was destroyed. ``when``: for the log, at start or on the host's return."""
    uuid = instance["uuid"]
    evacuation = (await _evacuations_from(manager, PROVING_STATUSES)).get(uuid)
    if evacuation is None or instance.get("host") == manager.host:
        LOG.warning("%s on %s: guest %s belongs to an instance on %s, and no evacuation from this "
                    "host is recorded; leaving it", when, manager.host, uuid, instance.get("host"))
        return False
    LOG.warning("%s on %s: instance %s was evacuated to %s (migration %s); destroying the local guest",
                when, manager.host, uuid, instance.get("host"), evacuation["uuid"])
    # Only the local guest goes: the ports and the claim are the destination's now.
    with contextlib.suppress(exceptions.InstanceNotFound):
        await manager.driver.destroy(admin_context(), instance, None)
    if evacuation["status"] == "done":
        await manager.conductor.migration_set_status(None, evacuation["uuid"], "completed")
    return True


async def complete_evacuations(manager) -> set[str]:
    """Evacuations from this host that are done and left no guest here are completed too (Nova
    completes every one it finds at start). One whose guest is still here (its destroy failed)
    stays ``done``, so that the destroy is tried again; returns their instances."""
    guests = set(await manager.driver.list_instance_uuids())
    left: set[str] = set()
    for uuid, evacuation in (await _evacuations_from(manager, ("done",))).items():
        if uuid in guests:
            LOG.warning("evacuation %s of instance %s from %s: its guest is still here; not completed",
                        evacuation["uuid"], uuid, manager.host)
            left.add(uuid)
            continue
        try:
            instance = await manager.conductor.instance_get(None, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            continue
        if instance.get("host") != manager.host:
            LOG.info("evacuation %s of instance %s from %s: completed", evacuation["uuid"], uuid, manager.host)
            await manager.conductor.migration_set_status(None, evacuation["uuid"], "completed")
    return left
