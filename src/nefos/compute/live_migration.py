"""Live migration, as Nova does it (the servers' ``os-migrateLive`` action, and aborting or
force-completing one through ``/servers/{id}/migrations/{id}``).

The API (``request``) checks the server (ACTIVE or PAUSED, no task, not locked for a non-admin)
and the requested host (400 when there is no such compute host), then in ONE transaction sets
task_state ``migrating``, records the migration (type ``live-migration``, status ``accepted``,
also kept in the server's system metadata so a delete cleans it up as a resize's) and the
``live-migration`` instance action. The conductor then checks the hosts and finds the
destination: without a host the scheduler picks one (never the source); a requested host goes
through the scheduler's filters from 2.30 unless ``force`` is set, and is taken as given before
2.30 (Nova's ``force`` semantics); either way the destination's claim is made for the migration's
uuid. Before 2.34 the conductor is called, so a check that fails (the source, a host that is down,
no valid host, a driver that refuses) answers 400; from 2.34 it is cast, as Nova's ``async_``.

Then, on the hosts:

===========  ====================================  ================================================
host         step                                  migration status
===========  ====================================  ================================================
source       ``live_migration``                    queued, preparing
destination  ``pre_live_migration`` (a call)       ready to receive the guest
source       the driver copies the guest           running (abort / force-complete act here)
source       post-live-migration at the source     post-migrating: the guest dropped, VIFs unplugged
destination  ``post_live_migration_at_destination``  ports bound here, the guest is this host's; the
                                                   server's host and node, its claim moved here (the
                                                   source's released); completed
===========  ====================================  ================================================

vm_state never changes (a PAUSED server stays PAUSED); task_state is ``migrating`` throughout.
A failure before the guest left the source rolls back (the destination cleaned, the claim given
back, task_state None on the source; the migration ``error``, ``cancelled`` after an abort), as
Nova's ``_rollback_live_migration``; a failure after it is an ERROR, as in Nova.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
import uuid as uuidlib

from sqlalchemy import select, update

from nefos import exceptions
from nefos.compute.rpcapi import ComputeRPCAPI
from nefos.db.models import Allocation
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, states
from nefos.objects.instance import MIGRATION_KEY

LOG = logging.getLogger(__name__)

# Instance actions and events (Nova's names).
LIVE_MIGRATION = "live-migration"
LIVE_MIGRATION_CANCEL = "live_migration_cancel"
LIVE_MIGRATION_FORCE_COMPLETE = "live_migration_force_complete"
CONDUCTOR_EVENT = "conductor_live_migrate_instance"
_ACTION = "os-migrateLive"


def _with_migration(instance: dict, migration: dict | None) -> dict:
    sysmeta = {k: v for k, v in (instance.get("system_metadata") or {}).items() if k != MIGRATION_KEY}
    if migration is not None:
        sysmeta[MIGRATION_KEY] = migration
    return sysmeta


def _live_migration_of(instance: dict) -> dict | None:
    migration = (instance.get("system_metadata") or {}).get(MIGRATION_KEY)
    return migration if migration and migration.get("type") == LIVE_MIGRATION else None


async def _host_up(rt, host: str) -> bool:
    from nefos.compute.services import COMPUTE_BINARY, is_up
    from nefos.db.models import Service
    async with rt.db.reader() as s:
        svc = (await s.execute(select(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY,
                                                     Service.deleted == 0))).scalar_one_or_none()
    return svc is not None and is_up(svc, rt.cfg)


class LiveMigrationControl:
    """What the API asked of a live migration running on its source (abort, force-complete)."""

    def __init__(self):
        self.aborted = False
        self.forced = False


# API layer ---------------------------------------------------------------------------------------
async def request(api, ctx, uuid: str, *, host: str | None, block_migration: bool | None,
                  force: bool | None, async_: bool) -> None:
    """``force``: None before 2.30 (a given host is taken as is), else whether to skip the filters."""
    rt = api.rt
    instance = await api.get(ctx, uuid)
    api._check_lock(ctx, instance)
    if instance["vm_state"] not in (states.ACTIVE, states.PAUSED):
        raise exceptions.InstanceInvalidState(action=_ACTION, instance_uuid=uuid, attr="vm_state",
                                              state=instance["vm_state"])
    if instance["task_state"] is not None:
        raise exceptions.InstanceInvalidState(action=_ACTION, instance_uuid=uuid, attr="task_state",
                                              state=instance["task_state"])
    if host is not None:
        await api._host_zone(host)  # 400 when there is no such compute host (Nova's ComputeHostNotFound)
    flavor = instance.get("flavor") or {}
    migration = {
        "uuid": str(uuidlib.uuid4()), "type": LIVE_MIGRATION, "status": "accepted",
        "source_compute": instance["host"], "source_node": instance["node"], "dest_compute": host,
        "dest_node": None, "old_flavor": flavor, "new_flavor": flavor, "old_vm_state": instance["vm_state"],
        "block_migration": block_migration,
    }
    async with rt.db.transaction() as s:
        try:
            await instance_obj.save(rt.db, uuid, {"task_state": states.MIGRATING,
                                                  "system_metadata": _with_migration(instance, migration)},
                                    expected_task_state=[None], expected_vm_state=[states.ACTIVE, states.PAUSED],
                                    session=s)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            raise exceptions.InstanceInvalidState(action=_ACTION, instance_uuid=uuid, attr="task_state",
                                                  state="changed") from None
        await migrations_obj.create(s, migration, instance, ctx)
        if host is not None:
            await migrations_obj.update_record(None, migration["uuid"], session=s, dest_compute=host)
        await actions.record_action(rt.db, ctx, uuid, LIVE_MIGRATION, session=s)
    forced_host = host if host is not None and force is not False else None
    spec = {
        "flavor": flavor, "image": {"id": instance.get("image_ref"), "properties": {}},
        "project_id": instance["project_id"], "user_id": instance["user_id"],
        "availability_zone": instance.get("pinned_availability_zone"),
        "force_hosts": [forced_host] if forced_host else [], "scheduler_hints": {}, "instance_group": None,
        "num_instances": 1,
        # As Nova's ignore_hosts: the source is never a candidate.
        "retry": {"num_attempts": 0, "hosts": [[instance["host"], instance["node"]]]},
    }
    if host is not None and not forced_host:
        spec["requested_destination"] = {"host": host, "node": None}
    try:
        await api.conductor.live_migrate_instance(ctx, uuid, spec, migration, forced_host, async_=async_)
    except (exceptions.NoValidHost, exceptions.ComputeServiceUnavailable, exceptions.HypervisorUnavailable) as exc:
        raise exceptions.Invalid(str(exc)) from None
    except exceptions.Invalid:
        raise
    except BaseException:
        # The conductor undoes what it began; this covers a request that never reached it.
        await _roll_back(rt.db, ctx, uuid, migration, "error")
        raise


async def _in_progress(api, ctx, uuid: str, migration_id: str, method: str, allowed: tuple[str, ...],
                       *, missing_is_bad_request: bool) -> tuple[dict, dict]:
    instance = await api.get(ctx, uuid)
    api._check_lock(ctx, instance)
    if instance["task_state"] != states.MIGRATING:
        raise exceptions.InstanceInvalidState(action=method, instance_uuid=uuid, attr="task_state",
                                              state=instance["task_state"])
    row = None
    if migration_id.isdigit() and int(migration_id) <= 2**31 - 1:
        row = await migrations_obj.get_by_id_and_instance(api.rt.db, int(migration_id), uuid)
    if row is None:
        exc = exceptions.MigrationNotFoundForInstance(migration_id=migration_id, instance_id=uuid)
        raise exceptions.Invalid(str(exc)) if missing_is_bad_request else exc
    if row["status"] not in allowed:
        raise exceptions.InvalidMigrationState(migration_id=migration_id, instance_uuid=uuid, state=row["status"],
                                               method=method)
    return instance, row


async def force_complete(api, ctx, uuid: str, migration_id: str) -> None:
    """Nova's live_migrate_force_complete: only a running live migration (else 400)."""
    instance, row = await _in_progress(api, ctx, uuid, migration_id, "force complete", ("running",),
                                       missing_is_bad_request=True)
    await actions.record_action(api.rt.db, ctx, uuid, LIVE_MIGRATION_FORCE_COMPLETE)
    await api.compute_rpcapi.live_migration_force_complete(ctx, row["source_compute"], uuid, row["uuid"])
    await actions.finish_action(api.rt.db, ctx, uuid)


async def abort(api, ctx, uuid: str, migration_id: str, *, queued_too: bool) -> None:
    """Nova's live_migrate_abort: a running live migration (from 2.65 a queued or preparing one too)."""
    allowed = ("running", "queued", "preparing") if queued_too else ("running",)
    instance, row = await _in_progress(api, ctx, uuid, migration_id, "abort live migration", allowed,
                                       missing_is_bad_request=False)
    await actions.record_action(api.rt.db, ctx, uuid, LIVE_MIGRATION_CANCEL)
    await api.compute_rpcapi.live_migration_abort(ctx, row["source_compute"], uuid, row["uuid"])
    await actions.finish_action(api.rt.db, ctx, uuid)


async def _roll_back(db, ctx, uuid: str, migration: dict, status: str, exc: BaseException | None = None,
                     *, host: str | None = None) -> None:
    """Undo a live migration that never moved the guest: the destination's claim, task_state None
    (vm_state as it was), the migration ``status`` (a fault when ``exc`` is given)."""
    await allocations.release(db, migration["uuid"])
    try:
        instance = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        return
    current = _live_migration_of(instance)
    if not current or current.get("uuid") != migration["uuid"]:
        return
    try:
        async with db.transaction() as s:
            await instance_obj.save(db, uuid, {"task_state": None, "progress": 0,
                                               "system_metadata": _with_migration(instance, None)},
                                    expected_task_state=[states.MIGRATING], session=s)
            await migrations_obj.set_status(db, migration["uuid"], status, session=s)
            if exc is not None:
                await instance_obj.add_fault(db, uuid, exc, host=host, session=s,
                                             details="".join(traceback.format_exception(exc)))
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        pass  # deleted meanwhile: the delete gives everything back
    await actions.finish_action(db, ctx, uuid, message="Error")


# Conductor ---------------------------------------------------------------------------------------
async def conductor_live_migrate(conductor, ctx, uuid: str, request_spec: dict, migration: dict,
                                 forced_host: str | None) -> None:
    """Check the hosts, claim on the destination (consumer: the migration), have the destination's
    driver check it can take the guest, then cast the migration to the source."""
    rt = conductor.rt
    db = rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    source = migration["source_compute"]
    try:
        if not source or not await _host_up(rt, source):
            raise exceptions.ComputeServiceUnavailable(host=source)
        if forced_host is not None:
            if forced_host == source:
                raise exceptions.UnableToMigrateToSelf(instance_id=uuid, host=source)
            if not await _host_up(rt, forced_host):
                raise exceptions.ComputeServiceUnavailable(host=forced_host)
        try:
            (selection,) = await conductor.scheduler.select_destinations(ctx, dict(request_spec),
                                                                         [migration["uuid"]])
        except exceptions.NoValidHost as exc:
            if forced_host is None:
                raise
            # A forced host skips the filters: only its free memory and disk can refuse it (Nova's
            # _check_destination_has_enough_memory).
            raise exceptions.MigrationPreCheckError(
                reason=f"Unable to migrate {uuid} to {forced_host}: Lack of resources") from exc
        try:
            await conductor.compute_rpcapi.check_can_live_migrate_destination(ctx, selection["host"], uuid)
        except exceptions.MigrationPreCheckError:
            raise
        except exceptions.Error as exc:
            raise exceptions.MigrationPreCheckError(reason=str(exc)) from exc
    except BaseException as exc:
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await _roll_back(db, ctx, uuid, migration, "error")
        raise
    migration = dict(migration, dest_compute=selection["host"], dest_node=selection["node"])
    try:
        instance = await instance_obj.get(db, uuid)
        current = _live_migration_of(instance)
        if not current or current["uuid"] != migration["uuid"]:
            raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=[states.MIGRATING],
                                                      actual=instance["task_state"])
        await instance_obj.save(db, uuid, {"system_metadata": _with_migration(instance, migration)},
                                expected_task_state=[states.MIGRATING])
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await allocations.release(db, migration["uuid"])
        await actions.event_finish(db, event_id, result="Error", details="instance deleted meanwhile")
        return
    await migrations_obj.set_destination(db, migration["uuid"], selection["host"], selection["node"])
    await actions.event_finish(db, event_id)
    try:
        await conductor.compute_rpcapi.live_migration(ctx, source, uuid, migration)
    except BaseException:
        await _roll_back(db, ctx, uuid, migration, "error")
        raise


# Compute hosts -----------------------------------------------------------------------------------
def _rpc(manager) -> ComputeRPCAPI:
    return ComputeRPCAPI(manager.rt.bus)


async def check_can_live_migrate_destination(manager, ctx, uuid: str) -> None:
    instance = await instance_obj.get(manager.rt.db, uuid)
    await manager.driver.check_can_live_migrate_destination(ctx, instance)


async def live_migration(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: prepare the destination, copy the guest, hand the server over."""
    db = manager.rt.db
    control = manager.live_migrations.setdefault(migration["uuid"], LiveMigrationControl())
    await migrations_obj.set_status(db, migration["uuid"], "queued")
    try:
        async with manager.instance_lock(uuid):
            await _live_migrate(manager, ctx, uuid, migration, control)
    finally:
        manager.live_migrations.pop(migration["uuid"], None)


async def _live_migrate(manager, ctx, uuid: str, migration: dict, control: LiveMigrationControl) -> None:
    db = manager.rt.db
    dest = migration["dest_compute"]
    try:
        instance = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        await allocations.release(db, migration["uuid"])
        return
    migrate_data = None
    try:
        async with actions.step(db, ctx, uuid, "compute_live_migration", manager.host):
            await migrations_obj.set_status(db, migration["uuid"], "preparing")
            await manager._notify(ctx, instance, "instance.live_migration_pre.start")
            if control.aborted:
                raise exceptions.LiveMigrationAborted(instance_uuid=uuid)
            await _rpc(manager).pre_live_migration(ctx, dest, uuid, migration)
            await manager._notify(ctx, instance, "instance.live_migration_pre.end")
            await migrations_obj.set_status(db, migration["uuid"], "running")
            migrate_data = await manager.driver.live_migration(ctx, instance, dest, control)
            # The guest runs on the destination now: past here there is no going back.
            await migrations_obj.set_status(db, migration["uuid"], "post-migrating")
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
        await _roll_back(db, ctx, uuid, migration, "cancelled" if aborted else "error",
                         None if aborted else exc, host=manager.host)
        return
    await _rpc(manager).post_live_migration_at_destination(ctx, dest, uuid, migration, migrate_data)


async def _error_out(manager, ctx, uuid: str, migration: dict, exc: BaseException) -> None:
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                             exceptions.InstanceInvalidState):
        await instance_obj.save_with_fault(manager.rt.db, uuid, {"vm_state": states.ERROR, "task_state": None},
                                           exc, host=manager.host, details="".join(traceback.format_exception(exc)),
                                           expected_task_state=[states.MIGRATING])
    await migrations_obj.set_status(manager.rt.db, migration["uuid"], "error")
    await actions.finish_action(manager.rt.db, ctx, uuid, message="Error")


async def pre_live_migration(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination (a call from the source): ready to receive the guest."""
    db = manager.rt.db
    async with actions.step(db, ctx, uuid, "compute_pre_live_migration", manager.host):
        instance = await instance_obj.get(db, uuid)
        if instance["task_state"] != states.MIGRATING:
            raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=[states.MIGRATING],
                                                      actual=instance["task_state"])
        alloc = await allocations.get(db, migration["uuid"])
        if alloc is None or alloc["compute_node_id"] != manager.resource_tracker.node_ids.get(migration["dest_node"]):
            raise exceptions.MigrationPreCheckError(
                reason=f"no resource claim for migration {migration['uuid']} on {manager.host}")
        await manager.driver.pre_live_migration(ctx, instance, instance.get("network_info") or [])


async def rollback_live_migration_at_destination(manager, ctx, uuid: str) -> None:
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(manager.rt.db, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            return
        await manager.driver.rollback_live_migration_at_destination(ctx, instance)


async def post_live_migration_at_destination(manager, ctx, uuid: str, migration: dict, migrate_data: dict) -> None:
    """On the destination: ports bound here, the guest is this host's, the server and its claim too."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(db, uuid)
        except exceptions.InstanceNotFound:
            await allocations.release(db, migration["uuid"])
            return
        try:
            async with actions.step(db, ctx, uuid, "compute_post_live_migration_at_destination", manager.host):
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                await manager.driver.post_live_migration_at_destination(ctx, instance, network_info, migrate_data)
                power_state = (await manager.driver.get_info(instance))["power_state"]
                async with db.transaction() as s:
                    instance = await instance_obj.save(
                        db, uuid, {"host": manager.host, "node": migration["dest_node"], "task_state": None,
                                   "power_state": power_state, "progress": 0, "network_info": network_info,
                                   "system_metadata": _with_migration(instance, None)},
                        expected_task_state=[states.MIGRATING], session=s)
                    # The source's claim is given back; the migration's claim here becomes the server's.
                    await allocations.release(db, uuid, session=s)
                    await s.execute(update(Allocation).where(Allocation.consumer_uuid == migration["uuid"])
                                    .values(consumer_uuid=uuid).execution_options(synchronize_session=False))
                    await migrations_obj.set_status(db, migration["uuid"], "completed", session=s)
                await manager._notify(ctx, instance, "instance.live_migration_post.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            with contextlib.suppress(Exception):
                await manager.driver.destroy(ctx, instance, None)
            await allocations.release(db, migration["uuid"])
            return
        except Exception as exc:
            LOG.error("instance %s: post live migration on %s failed: %s", uuid, manager.host, exc)
            await _error_out(manager, ctx, uuid, migration, exc)
            return
        await actions.finish_action(db, ctx, uuid)


async def recover(manager, ctx, instance: dict, why: str) -> None:
    """A live migration this host (its source) stopped running (a restart, or a request lost on its
    way): as Nova's init_host, it is given up: rolled back while the guest is still here, else the
    server is an ERROR (the guest's fate on the destination is unknown)."""
    uuid = instance["uuid"]
    migration = _live_migration_of(instance)
    exc = exceptions.NefosError(why)
    async with manager.instance_lock(uuid):
        try:
            current = await instance_obj.get(manager.rt.db, uuid)
        except exceptions.InstanceNotFound:
            return
        if current["task_state"] != states.MIGRATING or current.get("host") != manager.host:
            return
        LOG.warning("instance %s: %s; giving its live migration up", uuid, why)
        if migration is None:
            with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
                await instance_obj.save(manager.rt.db, uuid, {"task_state": None},
                                        expected_task_state=[states.MIGRATING])
            return
        if uuid in await manager.driver.list_instance_uuids():
            if migration.get("dest_compute"):
                with contextlib.suppress(Exception):
                    await _rpc(manager).rollback_live_migration_at_destination(ctx, migration["dest_compute"], uuid,
                                                                           wait=False)
            await _roll_back(manager.rt.db, ctx, uuid, migration, "error", exc, host=manager.host)
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
