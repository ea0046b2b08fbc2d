"""The compute hosts' steps of a live migration (Nova's ``live_migration``, ``pre_live_migration``,
``post_live_migration_at_destination``, the rollback, abort and force-complete); the steps and
statuses are described in ``nefos.control.compute.live_migration`` (the API's side). Every write goes
through the conductor (``nefos.control.conductor.migration_surface`` for the ones made together).
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.clients.compute import ComputeRPCAPI
from nefos.model import states
from nefos.model.faults import fault_of
from nefos.model.migration_state import live_migration_of as _live_migration_of, with_migration as _with_migration
from nefos.model.state_machine import expects, leaves, step_save

LOG = logging.getLogger(__name__)


class LiveMigrationControl:
    """What the API asked of a live migration running on its source (abort, force-complete)."""

    def __init__(self):
        self.aborted = False
        self.forced = False


def _rpc(manager) -> ComputeRPCAPI:
    return ComputeRPCAPI(manager.rt.bus)


async def check_can_live_migrate_destination(manager, ctx, uuid: str) -> None:
    instance = await manager.conductor.instance_get(None, uuid)
    await manager.driver.check_can_live_migrate_destination(ctx, instance)


async def live_migration(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: prepare the destination, copy the guest, hand the server over."""
    control = manager.live_migrations.setdefault(migration["uuid"], LiveMigrationControl())
    await manager.conductor.migration_set_status(None, migration["uuid"], "queued")
    try:
        async with manager.instance_lock(uuid):
            await _live_migrate(manager, ctx, uuid, migration, control)
    finally:
        manager.live_migrations.pop(migration["uuid"], None)


async def _live_migrate(manager, ctx, uuid: str, migration: dict, control: LiveMigrationControl) -> None:
    dest = migration["dest_compute"]
    try:
        instance = await manager.conductor.instance_get(None, uuid)
    except exceptions.InstanceNotFound:
        await manager.conductor.allocation_release(None, migration["uuid"])
        return
    migrate_data = None
    try:
        async with manager.conductor.step(ctx, uuid, "compute_live_migration", manager.host):
            await manager.conductor.migration_set_status(None, migration["uuid"], "preparing")
            await manager.notify(ctx, instance, "instance.live_migration_pre.start")
            if control.aborted:
                raise exceptions.LiveMigrationAborted(instance_uuid=uuid)
            await _rpc(manager).pre_live_migration(ctx, dest, uuid, migration)
            await manager.notify(ctx, instance, "instance.live_migration_pre.end")
            await manager.conductor.migration_set_status(None, migration["uuid"], "running")
            migrate_data = await manager.driver.live_migration(ctx, instance, dest, control)
            # The guest runs on the destination now: past here there is no going back.
            await manager.conductor.migration_set_status(None, migration["uuid"], "post-migrating")
            await manager.driver.post_live_migration_at_source(ctx, instance)
    except Exception as exc:
        if migrate_data is not None:
            LOG.error("instance %s: live migration to %s failed after the copy: %s", uuid, dest, exc)
            await _error_out(manager, ctx, uuid, migration, exc)
            return
        aborted = isinstance(exc, exceptions.LiveMigrationAborted)
        LOG.warning("instance %s: live migration to %s failed, rolling back: %s", uuid, dest, exc)
        with contextlib.suppress(Exception):
            await _rpc(manager).rollback_live_migration_at_destination(ctx, dest, uuid, wait=True)
        await manager.conductor.live_migration_roll_back(
            ctx, uuid, migration,
            "cancelled" if aborted else "error", None if aborted else fault_of(exc), manager.host,
            None if aborted else "".join(traceback.format_exception(exc)))
        return
    await _rpc(manager).post_live_migration_at_destination(ctx, dest, uuid, migration, migrate_data)


async def _error_out(manager, ctx, uuid: str, migration: dict, exc: BaseException) -> None:
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                             exceptions.InstanceInvalidState):
        await manager.conductor.save_with_fault(None, uuid, exc=exc, host=manager.host,
                                                details="".join(traceback.format_exception(exc)),
                                                **step_save("live-migration.failed", vm_state=states.ERROR))
    await manager.conductor.migration_set_status(None, migration["uuid"], "error")
    await manager.conductor.action_finish(ctx, uuid, message="Error")


async def pre_live_migration(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination (a call from the source): ready to receive the guest."""
    async with manager.conductor.step(ctx, uuid, "compute_pre_live_migration", manager.host):
        instance = await manager.conductor.instance_get(None, uuid)
        if instance["task_state"] not in (expected := expects("live-migration.at_destination")):
            raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=expected,
                                                      actual=instance["task_state"])
        try:
            await manager.resource_tracker.move_claim(migration)
        except exceptions.ComputeResourcesUnavailable as exc:
            # A live migration's claim that does not hold is a pre-check error (Nova's
            # _live_migration_claim): the server's fault says so, with a 400.
            raise exceptions.MigrationPreCheckError(reason=exc.kwargs["reason"]) from exc
        await manager.driver.pre_live_migration(ctx, instance, instance.get("network_info") or [])


async def rollback_live_migration_at_destination(manager, ctx, uuid: str) -> None:
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            return
        await manager.driver.rollback_live_migration_at_destination(ctx, instance)


async def post_live_migration_at_destination(manager, ctx, uuid: str, migration: dict, migrate_data: dict) -> None:
    """On the destination: ports bound here, the guest is this host's, the server and its claim too."""
    async with manager.instance_lock(uuid):
        try:
            instance = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            await manager.conductor.allocation_release(None, migration["uuid"])
            return
        try:
            async with manager.conductor.step(ctx, uuid, "compute_post_live_migration_at_destination", manager.host):
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                await manager.driver.post_live_migration_at_destination(ctx, instance, network_info, migrate_data)
                power_state = (await manager.driver.get_info(instance))["power_state"]
                # The source's claim is given back; the migration's claim here becomes the server's.
                instance = await manager.conductor.live_migration_completed(
                    ctx, uuid,
                    {"host": manager.host, "node": migration["dest_node"], "task_state": leaves("live-migration.done"),
                     "power_state": power_state, "progress": 0, "network_info": network_info,
                     "system_metadata": _with_migration(instance, None)},
                    migration["uuid"], expected_task_state=expects("live-migration.done"))
                await manager.notify(ctx, instance, "instance.live_migration_post.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            with contextlib.suppress(Exception):
                await manager.driver.destroy(ctx, instance, None)
            await manager.conductor.allocation_release(None, migration["uuid"])
            return
        except Exception as exc:
            LOG.error("instance %s: post live migration on %s failed: %s", uuid, manager.host, exc)
            await _error_out(manager, ctx, uuid, migration, exc)
            return
        await manager.conductor.action_finish(ctx, uuid)


async def recover(manager, ctx, instance: dict, why: str) -> None:
    """A live migration this host (its source) stopped running (a restart, or a request lost on its
    way): as Nova's init_host, it is given up: rolled back while the guest is still here, else the
    server is an ERROR (the guest's fate on the destination is unknown)."""
    uuid = instance["uuid"]
    migration = _live_migration_of(instance)
    exc = exceptions.NefosError(why)
    async with manager.instance_lock(uuid):
        try:
            current = await manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            return
        if current["task_state"] not in expects("live-migration.failed") or current.get("host") != manager.host:
            return
        LOG.warning("instance %s: %s; giving its live migration up", uuid, why)
        if migration is None:
            with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                await manager.conductor.instance_save(None, uuid, **step_save("live-migration.rolled_back"))
            return
        if uuid in await manager.driver.list_instance_uuids():
            if migration.get("dest_compute"):
                with contextlib.suppress(Exception):
                    await _rpc(manager).rollback_live_migration_at_destination(ctx, migration["dest_compute"], uuid,
                                                                               wait=False)
            await manager.conductor.live_migration_roll_back(ctx, uuid, migration, "error", fault_of(exc),
                                                             manager.host)
        else:
            await _error_out(manager, ctx, uuid, migration, exc)


def live_migration_abort(manager, migration_uuid: str) -> None:
    """On the source: the copy stops at its next look (the driver raises, the source rolls back)."""
    if (control := manager.live_migrations.get(migration_uuid)) is not None:
        control.aborted = True


def live_migration_force_complete(manager, migration_uuid: str) -> None:
    """On the source: the copy finishes now (Nova pauses the guest for its last pass; the fake
    driver just ends its copy)."""
    if (control := manager.live_migrations.get(migration_uuid)) is not None:
        control.forced = True
