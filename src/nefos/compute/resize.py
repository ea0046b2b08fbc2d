"""Resize and cold migration, as Nova does them (servers' ``resize``, ``confirmResize``,
``revertResize`` and ``migrate`` actions), on the boot pipeline's seams.

The API layer (``request_resize``, ``confirm``, ``revert``) checks the request, and in ONE
transaction consumes the quota of an upsize (the cores and RAM the new flavor adds), moves
task_state to ``resize_prep`` (compare-and-swap on task_state None, vm_state ACTIVE or STOPPED)
and records the migration in the server's system metadata (``MIGRATION_KEY``: its uuid, type,
status, source and destination, old and new flavors, the vm_state to go back to, the quota held).
It then calls the conductor, which asks the scheduler for a destination with a claim for the new
flavor whose consumer is the migration's uuid (the server's own claim stays on the source), and
calls ``prep_resize`` on the destination; a NoValidHost (400) or a host whose driver cannot
resize (409) undoes everything before the API answers.

Then, each step a cast and a compare-and-swap on the task_state the previous step set:

=============  ==========================  ===============================================
host           step                        task_state (vm_state)
=============  ==========================  ===============================================
destination    ``prep_resize``             resize_prep: the claim is checked, resize_prep notifications
source         ``resize_instance``         resize_migrating → guest off, VIFs unplugged, disks kept;
                                           resize_migrated, the server's host is now the destination
destination    ``finish_resize``           resize_finish: the new flavor, ports bound here, the guest
                                           started (waiting for network-vif-plugged as a boot does)
                                           unless it was stopped; → None (RESIZED: VERIFY_RESIZE)
source         ``confirm_resize``          the kept guest dropped, the source's claim released and the
                                           destination's becomes the server's; ACTIVE or STOPPED
destination    ``revert_resize``           resize_reverting: the new guest destroyed, its claim released,
                                           the server's host the source again
source         ``finish_revert_resize``    the old flavor, ports bound back, the kept guest restarted
                                           unless it was stopped; ACTIVE or STOPPED
=============  ==========================  ===============================================

A delete wins at every step: the step's next compare-and-swap fails, it undoes what it did on its
host (the destination's claim, a half-made guest), and the delete (``cleanup_on_delete``, from
the host the delete ran on) releases both claims and has the other host drop its guest. A failure
before the guest left the source puts the server back as it was (task_state None, a fault, the
destination's claim and the upsize quota released); a failure on the destination is an ERROR, as
in Nova (a delete then cleans both hosts).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import traceback
import uuid as uuidlib

from sqlalchemy import update

from nefos import exceptions
from nefos.compute import disk_config
from nefos.compute.rpcapi import ComputeRPCAPI
from nefos.db.models import Allocation, utcnow
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, quotas, states
from nefos.objects.instance import INSTANCES, MIGRATION_KEY

LOG = logging.getLogger(__name__)

# Instance actions (Nova's names).
RESIZE = "resize"
MIGRATE = "migrate"
CONFIRM_RESIZE = "confirmResize"
REVERT_RESIZE = "revertResize"

_FLAVOR_KEYS = ("id", "flavorid", "name", "memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap", "rxtx_factor",
                "extra_specs", "description", "is_public")


def migration_of(instance: dict) -> dict | None:
    return (instance.get("system_metadata") or {}).get(MIGRATION_KEY)


def _with_migration(instance: dict, migration: dict | None) -> dict:
    sysmeta = {k: v for k, v in (instance.get("system_metadata") or {}).items() if k != MIGRATION_KEY}
    if migration is not None:
        sysmeta[MIGRATION_KEY] = migration
    return sysmeta


def _flavor_columns(flavor: dict) -> dict:
    return {"flavor": flavor, "instance_type_id": flavor["id"], "vcpus": flavor["vcpus"],
            "memory_mb": flavor["memory_mb"], "root_gb": flavor["root_gb"],
            "ephemeral_gb": flavor.get("ephemeral_gb", 0)}


def _quota_back(migration: dict, kept: dict) -> dict[str, int]:
    """The cores and RAM held during the migration beyond what the flavor ``kept`` counts."""
    held = migration.get("quota") or {}
    return {"cores": max(held.get("cores", 0) - kept["vcpus"], 0),
            "ram": max(held.get("ram", 0) - kept["memory_mb"], 0)}


# API layer ---------------------------------------------------------------------------------------
async def request_resize(api, ctx, uuid: str, flavor_id: str | None = None, host: str | None = None,
                         auto_disk_config: bool | None = None) -> None:
    """``resize`` (``flavor_id``) or ``migrate`` (no flavor; ``host`` from 2.56); either sets the
    server's ``auto_disk_config`` to the requested one, MANUAL when none, as Nova's resize does."""
    from nefos.compute import flavors as flavors_mod
    from nefos.compute.services import is_up
    rt = api.rt
    instance = await api.get(ctx, uuid)
    action = RESIZE if flavor_id is not None else MIGRATE
    api._check_lock(ctx, instance)
    if instance["vm_state"] not in (states.ACTIVE, states.STOPPED):
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="vm_state",
                                              state=instance["vm_state"])
    if instance["task_state"] is not None:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="task_state",
                                              state=instance["task_state"])
    if not instance.get("host") or not await api._host_is_up(instance["host"], is_up):
        raise exceptions.ComputeServiceUnavailable(host=instance.get("host"))
    auto_disk_config = disk_config.for_resize(instance, auto_disk_config)
    old = instance.get("flavor") or {}
    if host is not None:
        if host == instance["host"]:
            raise exceptions.CannotMigrateToSameHost()
        await api._host_zone(host)  # 400 when there is no such compute host
    if flavor_id is not None:
        try:
            new = await flavors_mod.get_by_flavor_id(rt.db, flavor_id, ctx)
        except exceptions.FlavorNotFound as exc:
            raise exceptions.Invalid(str(exc)) from None
        if new.get("disabled") and new["id"] != old.get("id"):
            raise exceptions.Invalid(f"Flavor {flavor_id} could not be found.")
        if not new.get("root_gb") and old.get("root_gb"):
            raise exceptions.CannotResizeDisk(reason="Resize to zero disk flavor is not allowed.")
        if new["id"] == old.get("id"):
            raise exceptions.CannotResizeToSameFlavor()
        new = {k: new.get(k) for k in _FLAVOR_KEYS}
        with contextlib.suppress(exceptions.ImageNotFound, exceptions.NotAuthorized):
            image = await api.image_api.get(ctx.elevated(), instance["image_ref"])
            if new["memory_mb"] < (image.get("min_ram") or 0):
                raise exceptions.Invalid("Flavor's memory is too small for requested image.")
            if new["root_gb"] and new["root_gb"] < (image.get("min_disk") or 0):
                raise exceptions.Invalid("Flavor's disk is too small for requested image.")
    else:
        new = old
    same_host = bool(rt.cfg.allow_resize_to_same_host and flavor_id is not None)
    migration = {
        "uuid": str(uuidlib.uuid4()), "type": "resize" if flavor_id is not None else "migration",
        "status": "pre-migrating", "source_compute": instance["host"], "source_node": instance["node"],
        "dest_compute": None, "dest_node": None, "old_flavor": old, "new_flavor": new,
        "old_vm_state": instance["vm_state"],
        "quota": {"cores": max(old.get("vcpus") or 0, new.get("vcpus") or 0),
                  "ram": max(old.get("memory_mb") or 0, new.get("memory_mb") or 0)},
    }
    upsize = {"cores": max((new.get("vcpus") or 0) - (old.get("vcpus") or 0), 0),
              "ram": max((new.get("memory_mb") or 0) - (old.get("memory_mb") or 0), 0)}
    async with rt.db.transaction() as s:
        if any(upsize.values()):
            await quotas.consume(s, rt.cfg, instance["project_id"], upsize)
        try:
            await instance_obj.save(rt.db, uuid, {"task_state": states.RESIZE_PREP, "progress": 0,
                                                  "auto_disk_config": auto_disk_config,
                                                  "system_metadata": _with_migration(instance, migration)},
                                    expected_task_state=[None], expected_vm_state=[states.ACTIVE, states.STOPPED],
                                    session=s)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="task_state",
                                                  state="changed") from None
        await migrations_obj.create(s, migration, instance, ctx)
        await actions.record_action(rt.db, ctx, uuid, action, session=s)
    spec = {
        "flavor": new, "image": {"id": instance.get("image_ref"), "properties": {}},
        "project_id": instance["project_id"], "user_id": instance["user_id"],
        "availability_zone": instance.get("pinned_availability_zone"), "force_hosts": [],
        "scheduler_hints": {}, "instance_group": None, "num_instances": 1,
    }
    if not same_host:  # as Nova's ignore_hosts: the server's own host is not a candidate
        spec["retry"] = {"num_attempts": 0, "hosts": [[instance["host"], instance["node"]]]}
    if host is not None:
        spec["requested_destination"] = {"host": host, "node": None}
    try:
        await api.conductor.migrate_server(ctx, uuid, spec, migration)
    except exceptions.NoValidHost as exc:
        raise exceptions.Invalid(str(exc)) from None
    except BaseException:
        # The conductor undoes what it began; this also covers a request that never reached it
        # (a no-op when the conductor already did it: the migration is no longer the server's).
        await abort_before_move(rt.db, ctx, uuid, migration, None)
        raise


async def abort_before_move(db, ctx, uuid: str, migration: dict, exc: BaseException | None, *,
                            host: str | None = None) -> None:
    """Undo a resize that never moved the guest: the destination's claim, the upsize quota, the
    migration record; task_state back to None (with a fault when ``exc`` is given)."""
    await allocations.release(db, migration["uuid"])
    try:
        instance = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        return
    current = migration_of(instance)
    if not current or current.get("uuid") != migration["uuid"]:
        return
    try:
        async with db.transaction() as s:
            await instance_obj.save(db, uuid, {"task_state": None, "system_metadata": _with_migration(instance, None)},
                                    expected_task_state=[states.RESIZE_PREP, states.RESIZE_MIGRATING], session=s)
            await quotas.release(s, instance["project_id"], _quota_back(current, current["old_flavor"]))
            await migrations_obj.set_status(db, migration["uuid"], "error", session=s)  # as Nova's rollback
            if exc is not None:
                await instance_obj.add_fault(db, uuid, exc, host=host, session=s,
                                             details="".join(traceback.format_exception(exc)))
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        pass  # deleted meanwhile: the delete gives everything back
    await actions.finish_action(db, ctx, uuid, message="Error")


async def _optimistic_save(db, instance: dict, values: dict) -> bool:
    """Save ``values`` only if the server is still RESIZED with no task and unchanged since read."""
    q = (update(INSTANCES).where(INSTANCES.c.uuid == instance["uuid"], INSTANCES.c.deleted == 0,
                                 INSTANCES.c.vm_state == states.RESIZED, INSTANCES.c.task_state.is_(None),
                                 INSTANCES.c.updated_at == dt.datetime.fromisoformat(instance["updated_at"]))
         .values(**values, updated_at=utcnow()))
    async with db.transaction() as s:
        return (await s.execute(q)).rowcount == 1


async def _resized_migration(api, ctx, uuid: str, action: str) -> tuple[dict, dict]:
    instance = await api.get(ctx, uuid)
    api._check_lock(ctx, instance)
    if instance["vm_state"] != states.RESIZED:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="vm_state",
                                              state=instance["vm_state"])
    if instance["task_state"] is not None:
        raise exceptions.InstanceInvalidState(action=action, instance_uuid=uuid, attr="task_state",
                                              state=instance["task_state"])
    migration = migration_of(instance)
    if not migration or migration.get("status") != "finished":
        raise exceptions.MigrationNotFoundByStatus()
    return instance, migration


async def confirm(api, ctx, uuid: str) -> None:
    instance, migration = await _resized_migration(api, ctx, uuid, CONFIRM_RESIZE)
    migration = dict(migration, status="confirming")
    if not await _optimistic_save(api.rt.db, instance, {"system_metadata": _with_migration(instance, migration)}):
        raise exceptions.InstanceInvalidState(action=CONFIRM_RESIZE, instance_uuid=uuid, attr="task_state",
                                              state="changed")
    await migrations_obj.set_status(api.rt.db, migration["uuid"], "confirming")
    await actions.record_action(api.rt.db, ctx, uuid, CONFIRM_RESIZE)
    try:
        await api.compute_rpcapi.confirm_resize(ctx, migration["source_compute"], uuid, migration)
    except BaseException:
        await _hand_off_failed(api, ctx, uuid, instance, None, migration["uuid"])
        raise


async def revert(api, ctx, uuid: str) -> None:
    instance, migration = await _resized_migration(api, ctx, uuid, REVERT_RESIZE)
    migration = dict(migration, status="reverting")
    if not await _optimistic_save(api.rt.db, instance, {"task_state": states.RESIZE_REVERTING,
                                                        "system_metadata": _with_migration(instance, migration)}):
        raise exceptions.InstanceInvalidState(action=REVERT_RESIZE, instance_uuid=uuid, attr="task_state",
                                              state="changed")
    await migrations_obj.set_status(api.rt.db, migration["uuid"], "reverting")
    await actions.record_action(api.rt.db, ctx, uuid, REVERT_RESIZE)
    try:
        await api.compute_rpcapi.revert_resize(ctx, migration["dest_compute"], uuid, migration)
    except BaseException:
        await _hand_off_failed(api, ctx, uuid, instance, states.RESIZE_REVERTING, migration["uuid"])
        raise


async def _hand_off_failed(api, ctx, uuid: str, before: dict, task_state: str | None, migration_uuid: str) -> None:
    """A confirm or revert that never reached its host: the server goes back to RESIZED as it was
    (its task_state and migration record), the action is recorded as failed."""
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        async with api.rt.db.transaction() as s:
            await instance_obj.save(api.rt.db, uuid, {"task_state": None,
                                                      "system_metadata": before.get("system_metadata")},
                                    expected_task_state=[task_state], session=s)
            await migrations_obj.set_status(api.rt.db, migration_uuid, "finished", session=s)
    await actions.finish_action(api.rt.db, ctx, uuid, message="Error")


async def release_claims_of_deleted(db, instance: dict) -> None:
    """A deleted server's migration claim (its own claim is released by the delete)."""
    migration = migration_of(instance)
    if migration:
        await allocations.release(db, migration["uuid"])


# Conductor ---------------------------------------------------------------------------------------
CONDUCTOR_EVENT = "conductor_migrate_server"


async def conductor_migrate_server(conductor, ctx, uuid: str, request_spec: dict, migration: dict) -> None:
    """Schedule the destination (a claim for the new flavor, consumer: the migration), record it,
    and call ``prep_resize`` there. Anything that fails here is undone before the API answers."""
    db = conductor.rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    try:
        await conductor.compute_rpcapi.check_can_migrate(ctx, migration["source_compute"])
        (selection,) = await conductor.scheduler.select_destinations(ctx, dict(request_spec), [migration["uuid"]])
    except BaseException as exc:
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await abort_before_move(db, ctx, uuid, migration, None)
        raise
    migration = dict(migration, dest_compute=selection["host"], dest_node=selection["node"])
    try:
        instance = await instance_obj.get(db, uuid)
        await instance_obj.save(db, uuid, {"system_metadata": _with_migration(instance, migration)},
                                expected_task_state=[states.RESIZE_PREP])
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await allocations.release(db, migration["uuid"])
        await actions.event_finish(db, event_id, result="Error", details="instance deleted meanwhile")
        return
    await migrations_obj.set_destination(db, migration["uuid"], selection["host"], selection["node"])
    await actions.event_finish(db, event_id)
    try:
        await conductor.compute_rpcapi.prep_resize(ctx, selection["host"], uuid, migration)
    except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
        await allocations.release(db, migration["uuid"])
    except BaseException:
        await abort_before_move(db, ctx, uuid, migration, None)
        raise


# Compute hosts -----------------------------------------------------------------------------------
def _rpc(manager) -> ComputeRPCAPI:
    return ComputeRPCAPI(manager.rt.bus)


async def _current(db, uuid: str, release: str | None = None) -> dict | None:
    """The server, or None once deleted (then the claim of consumer ``release`` is given back)."""
    try:
        return await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        if release:
            await allocations.release(db, release)
        return None


async def _error_out(manager, uuid: str, exc: BaseException, what: str, updates: dict, **expected) -> None:
    """A failed step: ``updates`` (ERROR, as Nova) saved with the fault, unless someone else won meanwhile."""
    LOG.error("instance %s: %s on %s failed: %s", uuid, what, manager.host, exc)
    with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError,
                             exceptions.InstanceInvalidState):
        await instance_obj.save_with_fault(manager.rt.db, uuid, updates, exc, host=manager.host,
                                           details="".join(traceback.format_exception(exc)), **expected)


def check_can_migrate(manager) -> None:
    if not getattr(manager.driver, "supports_resize", False):
        raise exceptions.ResizeNotSupported(host=manager.host)


async def prep_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination (a call from the conductor): the claim is here, the driver can do it."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        async with actions.step(db, ctx, uuid, "compute_prep_resize", manager.host):
            check_can_migrate(manager)
            instance = await instance_obj.get(db, uuid)
            if instance["task_state"] != states.RESIZE_PREP:
                raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=[states.RESIZE_PREP],
                                                          actual=instance["task_state"])
            alloc = await allocations.get(db, migration["uuid"])
            if alloc is None or alloc["compute_node_id"] != manager.resource_tracker.node_ids.get(migration["dest_node"]):
                raise exceptions.ComputeResourcesUnavailable(
                    reason=f"no resource claim for migration {migration['uuid']} on {manager.host}")
            await manager._notify(ctx, instance, "instance.resize_prep.start")
            await manager._notify(ctx, instance, "instance.resize_prep.end")
    await _rpc(manager).resize_instance(ctx, migration["source_compute"], uuid, migration)


async def resize_instance(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: power the guest off, keep its disks, hand the server to the destination."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        if (instance := await _current(db, uuid, release=migration["uuid"])) is None:
            return
        moved = False
        try:
            async with actions.step(db, ctx, uuid, "compute_resize_instance", manager.host):
                async with db.transaction() as s:
                    instance = await instance_obj.save(db, uuid, {"task_state": states.RESIZE_MIGRATING},
                                                       expected_task_state=[states.RESIZE_PREP], session=s)
                    await migrations_obj.set_status(db, migration["uuid"], "migrating", session=s)
                await manager._notify(ctx, instance, "instance.resize.start")
                await manager.driver.migrate_disk_and_power_off(ctx, instance, migration["dest_compute"],
                                                                migration["new_flavor"],
                                                                instance.get("network_info") or [])
                moved = True
                migration = dict(migration, status="post-migrating")
                async with db.transaction() as s:
                    instance = await instance_obj.save(
                        db, uuid, {"task_state": states.RESIZE_MIGRATED, "host": migration["dest_compute"],
                                   "node": migration["dest_node"], "progress": 50,
                                   "system_metadata": _with_migration(instance, migration)},
                        expected_task_state=[states.RESIZE_MIGRATING], session=s)
                    await migrations_obj.set_status(db, migration["uuid"], "post-migrating", session=s)
                await manager._notify(ctx, instance, "instance.resize.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            # Deleted meanwhile: the delete (queued behind this lock on this host) destroys the guest.
            await allocations.release(db, migration["uuid"])
            return
        except Exception as exc:
            LOG.error("instance %s: resize on %s failed: %s", uuid, manager.host, exc)
            if moved:
                with contextlib.suppress(Exception):
                    await manager.driver.finish_revert_migration(
                        ctx, instance, instance.get("network_info") or [],
                        power_on=migration["old_vm_state"] != states.STOPPED)
            await abort_before_move(db, ctx, uuid, migration, exc, host=manager.host)
            return
    await _rpc(manager).finish_resize(ctx, migration["dest_compute"], uuid, migration)


async def _start_guest(manager, ctx, instance: dict, network_info: list[dict], driver_call, *, power_on: bool,
                       what: str) -> None:
    """``driver_call(paused)`` makes the guest; when it starts, wait for its network-vif-plugged
    events as a boot does (paused, then resumed)."""
    events_api = manager.instance_events
    events = (events_api.vif_events(network_info, replug=True)
              if power_on and events_api.should_wait(power_on=True) else [])
    if not events:
        await driver_call(False)
        return
    await events_api.plug_and_wait(ctx, instance, events, lambda: driver_call(True), what=what)
    await manager.driver.unpause(instance)


async def finish_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination: the new flavor, the ports bound here, the guest made (and started)."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        if (instance := await _current(db, uuid, release=migration["uuid"])) is None:
            return
        try:
            async with actions.step(db, ctx, uuid, "compute_finish_resize", manager.host):
                instance = await instance_obj.save(
                    db, uuid, {"task_state": states.RESIZE_FINISH, **_flavor_columns(migration["new_flavor"])},
                    expected_task_state=[states.RESIZE_MIGRATED])
                await manager._notify(ctx, instance, "instance.resize_finish.start")
                await manager.instance_events.begin_operation(uuid)  # before the ports are bound here
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                instance = await instance_obj.save(db, uuid, {"network_info": network_info},
                                                   expected_task_state=[states.RESIZE_FINISH])
                block_device_info = await manager._prep_block_device(instance)
                power_on = migration["old_vm_state"] != states.STOPPED
                image_meta = {"id": instance.get("image_ref"), "properties": {}}

                async def make(paused: bool):
                    await manager.driver.finish_migration(ctx, instance, network_info, image_meta, block_device_info,
                                                          power_on=power_on, paused=paused)

                await _start_guest(manager, ctx, instance, network_info, make, power_on=power_on,
                                   what="finish_resize")
                power_state = (await manager.driver.get_info(instance))["power_state"]
                migration = dict(migration, status="finished")
                async with db.transaction() as s:
                    instance = await instance_obj.save(
                        db, uuid, {"vm_state": states.RESIZED, "task_state": None, "power_state": power_state,
                                   "progress": 100, "system_metadata": _with_migration(instance, migration),
                                   "launched_at": utcnow().isoformat()},  # Nova relaunches it here (usage)
                        expected_task_state=[states.RESIZE_FINISH], session=s)
                    await migrations_obj.set_status(db, migration["uuid"], "finished", session=s)
                await manager._notify(ctx, instance, "instance.resize_finish.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            with contextlib.suppress(Exception):
                await manager.driver.destroy(ctx, instance, instance.get("network_info"))
            await allocations.release(db, migration["uuid"])
            return
        except Exception as exc:
            await _error_out(manager, uuid, exc, "finishing the resize", {"vm_state": states.ERROR, "task_state": None},
                             expected_task_state=[states.RESIZE_FINISH, states.RESIZE_MIGRATED])
            await migrations_obj.set_status(db, migration["uuid"], "error")  # Nova's errors_out_migration
        finally:
            await actions.finish_action(db, ctx, uuid)


async def confirm_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: drop the kept guest; the destination's claim becomes the server's."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        if (instance := await _current(db, uuid)) is None:
            return
        current = migration_of(instance) or {}
        try:
            if (instance["vm_state"] != states.RESIZED or instance["task_state"] is not None
                    or current.get("uuid") != migration["uuid"] or current.get("status") != "confirming"):
                return
            async with actions.step(db, ctx, uuid, "compute_confirm_resize", manager.host):
                await manager._notify(ctx, instance, "instance.resize_confirm.start")
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await manager.driver.confirm_migration(ctx, instance, instance.get("network_info") or [])
                vm_state = states.STOPPED if instance["power_state"] == states.SHUTDOWN else states.ACTIVE
                async with db.transaction() as s:
                    instance = await instance_obj.save(
                        db, uuid, {"vm_state": vm_state, "task_state": None,
                                   "system_metadata": _with_migration(instance, None)},
                        expected_task_state=[None], expected_vm_state=[states.RESIZED], session=s)
                    await allocations.release(db, uuid, session=s)
                    await s.execute(update(Allocation).where(Allocation.consumer_uuid == migration["uuid"])
                                    .values(consumer_uuid=uuid).execution_options(synchronize_session=False))
                    await quotas.release(s, instance["project_id"], _quota_back(current, current["new_flavor"]))
                    await migrations_obj.set_status(db, migration["uuid"], "confirmed", session=s)
                await manager._notify(ctx, instance, "instance.resize_confirm.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            return  # deleted (or reverted) meanwhile: that operation has the claims
        except Exception as exc:
            await _error_out(manager, uuid, exc, "confirming the resize", {"vm_state": states.ERROR},
                             expected_task_state=[None], expected_vm_state=[states.RESIZED])
            await migrations_obj.set_status(db, migration["uuid"], "error")
        finally:
            await actions.finish_action(db, ctx, uuid)


async def revert_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the destination: destroy the new guest, release its claim, give the server back to the source."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        if (instance := await _current(db, uuid)) is None:
            return
        try:
            async with actions.step(db, ctx, uuid, "compute_revert_resize", manager.host):
                await manager._notify(ctx, instance, "instance.resize_revert.start")
                with contextlib.suppress(exceptions.InstanceNotFound):
                    await manager.driver.destroy_migrated_guest(ctx, instance, instance.get("network_info") or [])
                async with db.transaction() as s:
                    await instance_obj.save(db, uuid, {"host": migration["source_compute"],
                                                       "node": migration["source_node"]},
                                            expected_task_state=[states.RESIZE_REVERTING], session=s)
                    await allocations.release(db, migration["uuid"], session=s)
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            return  # the delete cleans both hosts
        except Exception as exc:
            await _error_out(manager, uuid, exc, "reverting the resize", {"vm_state": states.ERROR, "task_state": None},
                             expected_task_state=[states.RESIZE_REVERTING])
            await migrations_obj.set_status(db, migration["uuid"], "error")
            await actions.finish_action(db, ctx, uuid)
            return
    await _rpc(manager).finish_revert_resize(ctx, migration["source_compute"], uuid, migration)


async def finish_revert_resize(manager, ctx, uuid: str, migration: dict) -> None:
    """On the source: the old flavor, the ports bound back here, the kept guest back (and started)."""
    db = manager.rt.db
    async with manager.instance_lock(uuid):
        if (instance := await _current(db, uuid)) is None:
            return
        current = migration_of(instance) or migration
        try:
            async with actions.step(db, ctx, uuid, "compute_finish_revert_resize", manager.host):
                instance = await instance_obj.save(db, uuid, _flavor_columns(migration["old_flavor"]),
                                                   expected_task_state=[states.RESIZE_REVERTING])
                await manager.instance_events.begin_operation(uuid)
                network_info = await manager.network_api.setup_instance_network_on_host(ctx, instance, manager.host)
                instance = await instance_obj.save(db, uuid, {"network_info": network_info},
                                                   expected_task_state=[states.RESIZE_REVERTING])
                power_on = migration["old_vm_state"] != states.STOPPED

                async def restore(paused: bool):
                    await manager.driver.finish_revert_migration(ctx, instance, network_info, power_on=power_on,
                                                                 paused=paused)

                await _start_guest(manager, ctx, instance, network_info, restore, power_on=power_on,
                                   what="finish_revert_resize")
                power_state = (await manager.driver.get_info(instance))["power_state"]
                async with db.transaction() as s:
                    instance = await instance_obj.save(
                        db, uuid, {"vm_state": migration["old_vm_state"], "task_state": None,
                                   "power_state": power_state, "progress": 0,
                                   "system_metadata": _with_migration(instance, None),
                                   "launched_at": utcnow().isoformat()},  # as Nova's finish_revert_resize
                        expected_task_state=[states.RESIZE_REVERTING], session=s)
                    await quotas.release(s, instance["project_id"], _quota_back(current, migration["old_flavor"]))
                    await migrations_obj.set_status(db, migration["uuid"], "reverted", session=s)
                await manager._notify(ctx, instance, "instance.resize_revert.end")
        except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
            return  # the delete (on this host, behind this lock) destroys the guest
        except Exception as exc:
            await _error_out(manager, uuid, exc, "finishing the revert", {"vm_state": states.ERROR, "task_state": None},
                             expected_task_state=[states.RESIZE_REVERTING])
            await migrations_obj.set_status(db, migration["uuid"], "error")
        finally:
            await actions.finish_action(db, ctx, uuid)


async def cleanup_on_delete(manager, ctx, instance: dict) -> None:
    """From the host a delete ran on: the migration's claim, and the other host's guest."""
    migration = migration_of(instance)
    if not migration:
        return
    await allocations.release(manager.rt.db, migration["uuid"])
    for host in {migration.get("source_compute"), migration.get("dest_compute")} - {None, manager.host}:
        await _rpc(manager).cleanup_deleted_migration(ctx, host, instance["uuid"])


async def cleanup_deleted_migration(manager, ctx, uuid: str) -> None:
    """On the other host of a deleted server's migration: drop its guest here, if any."""
    async with manager.instance_lock(uuid):
        try:
            instance = await instance_obj.get(manager.rt.db, uuid, read_deleted=True)
        except exceptions.InstanceNotFound:
            return
        if not instance.get("deleted"):
            return
        with contextlib.suppress(exceptions.InstanceNotFound):
            await manager.driver.destroy(ctx, instance, instance.get("network_info"))
