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
import uuid as uuidlib

from sqlalchemy import or_, update

from nefos import exceptions
from nefos.control.compute import disk_config
from nefos.db.models import utcnow
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, moves, quotas
from nefos.model import state_machine
from nefos.objects.instance import INSTANCES

LOG = logging.getLogger(__name__)

from nefos.model.migration_state import (  # noqa: F401  (re-exported for the API and its tests)
    CONFIRM_RESIZE, MIGRATE, RESIZE, REVERT_RESIZE, flavor_columns as _flavor_columns, migration_of,
    quota_back as _quota_back, with_migration as _with_migration)

_FLAVOR_KEYS = ("id", "flavorid", "name", "memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap", "rxtx_factor",
                "extra_specs", "description", "is_public")


# API layer ---------------------------------------------------------------------------------------
async def request_resize(api, ctx, uuid: str, flavor_id: str | None = None, host: str | None = None,
                         auto_disk_config: bool | None = None) -> None:
    """``resize`` (``flavor_id``) or ``migrate`` (no flavor; ``host`` from 2.56); either sets the
    server's ``auto_disk_config`` to the requested one, MANUAL when none, as Nova's resize does."""
    from nefos.control.compute import flavors as flavors_mod
    from nefos.control.compute.services import is_up
    rt = api.rt
    instance = await api.get(ctx, uuid)
    action = RESIZE if flavor_id is not None else MIGRATE
    api.check_lock(ctx, instance)
    state_machine.check(action, instance)
    if not instance.get("host") or not await api.host_is_up(instance["host"], is_up):
        raise exceptions.ComputeServiceUnavailable(host=instance.get("host"))
    auto_disk_config = disk_config.for_resize(instance, auto_disk_config)
    old = instance.get("flavor") or {}
    if host is not None:
        if host == instance["host"]:
            raise exceptions.CannotMigrateToSameHost()
        await api.host_zone(host)  # 400 when there is no such compute host
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
            await instance_obj.save(rt.db, uuid, {"task_state": state_machine.operation(action).sets, "progress": 0,
                                                  "auto_disk_config": auto_disk_config,
                                                  "system_metadata": _with_migration(instance, migration)},
                                    **state_machine.allowed_from(action), session=s)
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
        await moves.abort_resize_before_move(rt.db, ctx, uuid, migration)
        raise


def _one_of(column, values):
    """SQL: ``column`` holds one of ``values`` (None: NULL)."""
    given = [v for v in values if v is not None]
    return or_(*([column.in_(given)] if given else []), *([column.is_(None)] if None in values else []))


async def _optimistic_save(db, instance: dict, action: str, values: dict) -> bool:
    """Save ``values`` only if the server is still in a state ``action`` is allowed from (RESIZED,
    no task) and unchanged since read."""
    op = state_machine.operation(action)
    q = (update(INSTANCES).where(INSTANCES.c.uuid == instance["uuid"], INSTANCES.c.deleted == 0,
                                 _one_of(INSTANCES.c.vm_state, op.vm_states),
                                 _one_of(INSTANCES.c.task_state, op.task_states),
                                 INSTANCES.c.updated_at == dt.datetime.fromisoformat(instance["updated_at"]))
         .values(**values, updated_at=utcnow()))
    async with db.transaction() as s:
        return (await s.execute(q)).rowcount == 1


async def _resized_migration(api, ctx, uuid: str, action: str) -> tuple[dict, dict]:
    instance = await api.get(ctx, uuid)
    api.check_lock(ctx, instance)
    state_machine.check(action, instance)
    migration = migration_of(instance)
    if not migration or migration.get("status") != "finished":
        raise exceptions.MigrationNotFoundByStatus()
    return instance, migration


async def confirm(api, ctx, uuid: str) -> None:
    instance, migration = await _resized_migration(api, ctx, uuid, CONFIRM_RESIZE)
    migration = dict(migration, status="confirming")
    if not await _optimistic_save(api.rt.db, instance, CONFIRM_RESIZE,
                                  {"system_metadata": _with_migration(instance, migration)}):
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
    reverting = state_machine.operation(REVERT_RESIZE).sets
    if not await _optimistic_save(api.rt.db, instance, REVERT_RESIZE,
                                  {"task_state": reverting, "system_metadata": _with_migration(instance, migration)}):
        raise exceptions.InstanceInvalidState(action=REVERT_RESIZE, instance_uuid=uuid, attr="task_state",
                                              state="changed")
    await migrations_obj.set_status(api.rt.db, migration["uuid"], "reverting")
    await actions.record_action(api.rt.db, ctx, uuid, REVERT_RESIZE)
    try:
        await api.compute_rpcapi.revert_resize(ctx, migration["dest_compute"], uuid, migration)
    except BaseException:
        await _hand_off_failed(api, ctx, uuid, instance, reverting, migration["uuid"])
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
