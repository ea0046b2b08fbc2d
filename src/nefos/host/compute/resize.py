"""The compute hosts' steps of a resize or cold migration (Nova's ``prep_resize``,
``resize_instance``, ``finish_resize``, ``confirm_resize``, ``revert_resize`` and
``finish_revert_resize``); the steps, the hosts and the task states are described in
``nefos.control.compute.resize`` (the API's side). Every write goes through the conductor; the writes a
step made together (the instance with its migration record, claims, quota) are one conductor
method each (``nefos.control.conductor.migration_surface``).
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.clients.compute import ComputeRPCAPI
from nefos.model import states
from nefos.model.faults import fault_of
from nefos.model.migration_state import (flavor_columns as _flavor_columns, migration_of,
                                           with_migration as _with_migration)
from nefos.model.state_machine import expects, leaves, step_save
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)


def _rpc(manager) -> ComputeRPCAPI:
    return ComputeRPCAPI(manager.rt.bus)


async def _current(manager, uuid: str, release: str | None = None) -> dict | None:
    """The server, or None once deleted (then the claim of consumer ``release`` is given back)."""
    try:
        return await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        if release:
            await manager.conductor.allocation_release(None, release)
        return None


async def _error_out(manager, uuid: str, exc: BaseException, what: str, updates: dict, **expected) -> None:
    """A failed step: ``updates`` (ERROR, as Nova) saved with the fault, unless someone else won meanwhile."""
    LOG.error("instance %s: %s on %s failed: %s", uuid, what, manager.host, exc)
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                             exceptions.InstanceInvalidState):
        await manager.conductor.save_with_fault(None, uuid, updates, exc, host=manager.host,
                                                details="".join(traceback.format_exception(exc)), **expected)


def check_can_migrate(manager) -> None:
    if not getattr(manager.driver, "supports_resize", False):
        raise exceptions.ResizeNotSupported(host=manager.host)


async def prep_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination (a call from the conductor): the claim is here, the driver can do it."""
    async with manager.instance_lock(uuid):
        async with manager.conductor.step(ctx, uuid, "compute_prep_resize", manager.host):
            check_can_migrate(manager)
            instance = await manager.conductor.instance_get(None, uuid)
            if instance["task_state"] not in expects("resize.prep"):
                raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=expects("resize.prep"),
                                                          actual=instance["task_state"])
            await manager.resource_tracker.move_claim(migration)
            await manager.notify(ctx, instance, "instance.resize_prep.start")
            await manager.notify(ctx, instance, "instance.resize_prep.end")
    await _rpc(manager).resize_instance(ctx, migration["source_compute"], uuid, migration)


async def resize_instance(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: power the guest off, keep its disks, hand the server to the destination."""
    async with manager.instance_lock(uuid):
        if (instance := await _current(manager, uuid, release=migration["uuid"])) is None:
            return
        moved = False
        try:
            async with manager.conductor.step(ctx, uuid, "compute_resize_instance", manager.host):
                instance = await manager.conductor.migration_save(ctx, uuid, {"task_state": leaves("resize.migrating")},
                                                                  migration["uuid"], "migrating",
                                                                  expected_task_state=expects("resize.migrating"))
                await manager.notify(ctx, instance, "instance.resize.start")
                await manager.driver.migrate_disk_and_power_off(ctx, instance, migration["dest_compute"],
                                                                migration["new_flavor"],
                                                                instance.get("network_info") or [])
                moved = True
                migration = dict(migration, status="post-migrating")
                instance = await manager.conductor.migration_save(
                    ctx, uuid,
                    {"task_state": leaves("resize.migrated"), "host": migration["dest_compute"],
                     "node": migration["dest_node"], "progress": 50,
                     "system_metadata": _with_migration(instance, migration)},
                    migration["uuid"], "post-migrating", expected_task_state=expects("resize.migrated"))
                await manager.notify(ctx, instance, "instance.resize.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            # Deleted meanwhile: the delete (queued behind this lock on this host) destroys the guest.
            await manager.conductor.allocation_release(None, migration["uuid"])
            return
        except Exception as exc:
            LOG.error("instance %s: resize on %s failed: %s", uuid, manager.host, exc)
            if moved:
                with contextlib.suppress(Exception):
                    await manager.driver.finish_revert_migration(
                        ctx, instance, instance.get("network_info") or [],
                        power_on=migration["old_vm_state"] != states.STOPPED)
            await manager.conductor.migration_abort_before_move(ctx, uuid, migration, fault_of(exc), manager.host,
                                                                "".join(traceback.format_exception(exc)))
            return
    await _rpc(manager).finish_resize(ctx, migration["dest_compute"], uuid, migration)


async def finish_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination: the new flavor, the ports bound here, the guest made (and started)."""
    async with manager.instance_lock(uuid):
        if (instance := await _current(manager, uuid, release=migration["uuid"])) is None:
            return
        try:
            async with manager.conductor.step(ctx, uuid, "compute_finish_resize", manager.host):
                instance = await manager.conductor.instance_save(
                    None, uuid, **step_save("resize.finish", **_flavor_columns(migration["new_flavor"])))
                await manager.notify(ctx, instance, "instance.resize_finish.start")
                await manager.instance_events.begin_operation(uuid)  # before the ports are bound here
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                instance = await manager.conductor.instance_save(None, uuid, **step_save("resize.networked",
                                                                                         network_info=network_info))
                block_device_info = await manager.prep_block_device(instance)
                power_on = migration["old_vm_state"] != states.STOPPED
                image_meta = {"id": instance.get("image_ref"), "properties": {}}

                async def make(paused: bool):
                    await manager.driver.finish_migration(ctx, instance, network_info, image_meta, block_device_info,
                                                          power_on=power_on, paused=paused)

                # Paused until its VIFs are plugged here, as a boot's guest.
                await manager.instance_events.start_paused(ctx, instance, network_info, make, what="finish_resize",
                                                           power_on=power_on, replug=True)
                power_state = (await manager.driver.get_info(instance))["power_state"]
                migration = dict(migration, status="finished")
                instance = await manager.conductor.migration_save(
                    ctx, uuid, {"vm_state": states.RESIZED, "task_state": leaves("resize.finished"),
                                "power_state": power_state, "progress": 100,
                                "system_metadata": _with_migration(instance, migration),
                                "launched_at": utcnow().isoformat()},  # Nova relaunches it here (usage)
                    migration["uuid"], "finished", expected_task_state=expects("resize.finished"))
                await manager.notify(ctx, instance, "instance.resize_finish.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            with contextlib.suppress(Exception):
                await manager.driver.destroy(ctx, instance, instance.get("network_info"))
            await manager.conductor.allocation_release(None, migration["uuid"])
            return
        except Exception as exc:
            await _error_out(manager, uuid, exc, "finishing the resize",
                             **step_save("resize.finish_failed", vm_state=states.ERROR))
            await manager.conductor.migration_set_status(None, migration["uuid"],
                                                         "error")  # Nova's errors_out_migration
        finally:
            await manager.conductor.action_finish(ctx, uuid)


async def confirm_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: drop the kept guest; the destination's claim becomes the server's."""
    async with manager.instance_lock(uuid):
        if (instance := await _current(manager, uuid)) is None:
            return
        current = migration_of(instance) or {}
        try:
            if (instance["vm_state"] != states.RESIZED or instance["task_state"] not in expects("confirmResize.done")
                    or current.get("uuid") != migration["uuid"] or current.get("status") != "confirming"):
                return
            async with manager.conductor.step(ctx, uuid, "compute_confirm_resize", manager.host):
                await manager.notify(ctx, instance, "instance.resize_confirm.start")
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await manager.driver.confirm_migration(ctx, instance, instance.get("network_info") or [])
                vm_state = states.STOPPED if instance["power_state"] == states.SHUTDOWN else states.ACTIVE
                instance = await manager.conductor.resize_confirmed(
                    ctx, uuid,
                    {"vm_state": vm_state, "task_state": leaves("confirmResize.done"),
                     "system_metadata": _with_migration(instance, None)},
                    current, expected_task_state=expects("confirmResize.done"), expected_vm_state=[states.RESIZED])
                await manager.notify(ctx, instance, "instance.resize_confirm.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            return  # deleted (or reverted) meanwhile: that operation has the claims
        except Exception as exc:
            await _error_out(manager, uuid, exc, "confirming the resize",
                             **step_save("confirmResize.failed", vm_state=states.ERROR),
                             expected_vm_state=[states.RESIZED])
            await manager.conductor.migration_set_status(None, migration["uuid"], "error")
        finally:
            await manager.conductor.action_finish(ctx, uuid)


async def revert_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination: destroy the new guest, release its claim, give the server back to the source."""
    async with manager.instance_lock(uuid):
        if (instance := await _current(manager, uuid)) is None:
            return
        try:
            async with manager.conductor.step(ctx, uuid, "compute_revert_resize", manager.host):
                await manager.notify(ctx, instance, "instance.resize_revert.start")
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await manager.driver.destroy_migrated_guest(ctx, instance, instance.get("network_info") or [])
                await manager.conductor.resize_reverted_at_destination(ctx, uuid, migration["source_compute"],
                                                                       migration["source_node"], migration["uuid"])
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            return  # the delete cleans both hosts
        except Exception as exc:
            await _error_out(manager, uuid, exc, "reverting the resize",
                             **step_save("revertResize.failed", vm_state=states.ERROR))
            await manager.conductor.migration_set_status(None, migration["uuid"], "error")
            await manager.conductor.action_finish(ctx, uuid)
            return
    await _rpc(manager).finish_revert_resize(ctx, migration["source_compute"], uuid, migration)


async def finish_revert_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: the old flavor, the ports bound back here, the kept guest back (and started)."""
    async with manager.instance_lock(uuid):
        if (instance := await _current(manager, uuid)) is None:
            return
        current = migration_of(instance) or migration
        try:
            async with manager.conductor.step(ctx, uuid, "compute_finish_revert_resize", manager.host):
                instance = await manager.conductor.instance_save(
                    None, uuid, **step_save("revertResize.at_source", **_flavor_columns(migration["old_flavor"])))
                await manager.instance_events.begin_operation(uuid)
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                instance = await manager.conductor.instance_save(None, uuid, **step_save("revertResize.at_source",
                                                                                         network_info=network_info))
                power_on = migration["old_vm_state"] != states.STOPPED

                async def restore(paused: bool):
                    await manager.driver.finish_revert_migration(ctx, instance, network_info, power_on=power_on,
                                                                 paused=paused)

                # Paused until its VIFs are plugged here, as a boot's guest.
                await manager.instance_events.start_paused(ctx, instance, network_info, restore,
                                                           what="finish_revert_resize", power_on=power_on,
                                                           replug=True)
                power_state = (await manager.driver.get_info(instance))["power_state"]
                instance = await manager.conductor.resize_revert_finished(
                    ctx, uuid, {"vm_state": migration["old_vm_state"], "task_state": leaves("revertResize.done"),
                                "power_state": power_state, "progress": 0,
                                "system_metadata": _with_migration(instance, None),
                                "launched_at": utcnow().isoformat()},  # as Nova's finish_revert_resize
                    current, migration["old_flavor"], expected_task_state=expects("revertResize.done"))
                await manager.notify(ctx, instance, "instance.resize_revert.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            return  # the delete (on this host, behind this lock) destroys the guest
        except Exception as exc:
            await _error_out(manager, uuid, exc, "finishing the revert",
                             **step_save("revertResize.failed", vm_state=states.ERROR))
            await manager.conductor.migration_set_status(None, migration["uuid"], "error")
        finally:
            await manager.conductor.action_finish(ctx, uuid)


async def cleanup_on_delete(manager, ctx, instance: dict) -> None:
    """From the host a delete ran on: the migration's claim, and the other host's guest."""
    migration = migration_of(instance)
    if not migration:
        return
    await manager.conductor.allocation_release(None, migration["uuid"])
    for host in {migration.get("source_compute"), migration.get("dest_compute")} - {None, manager.host}:
        await _rpc(manager).cleanup_deleted_migration(ctx, host, instance["uuid"])


async def cleanup_deleted_migration(manager, ctx, uuid: str) -> None:
    """On the other host of a deleted server's migration: drop its guest here, if any."""
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            return
        if not instance.get("deleted"):
            return
        with contextlib.suppress(exceptions.InstanceNotFound):
            await manager.driver.destroy(ctx, instance, instance.get("network_info"))
