"""The conductor's step of a live migration (Nova's ``LiveMigrationTask``: check the hosts, claim
on the destination, cast to the source; the API's steps are ``nefos.compute.live_migration``, the
hosts' ``nefos.compute.host.live_migration``)."""

from __future__ import annotations

import traceback

from nefos import exceptions
from nefos.compute.live_migration import CONDUCTOR_EVENT, host_up, roll_back
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, states
from nefos.objects.migration_state import live_migration_of as _live_migration_of, with_migration as _with_migration

async def live_migrate(conductor, ctx, uuid: str, request_spec: dict, migration: dict,
                                 forced_host: str | None) -> None:
    """Check the hosts, claim on the destination (consumer: the migration), have the destination's
    driver check it can take the guest, then cast the migration to the source."""
    rt = conductor.rt
    db = rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    source = migration["source_compute"]
    try:
        if not source or not await host_up(rt, source):
            raise exceptions.ComputeServiceUnavailable(host=source)
        if forced_host is not None:
            if forced_host == source:
                raise exceptions.UnableToMigrateToSelf(instance_id=uuid, host=source)
            if not await host_up(rt, forced_host):
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
        await roll_back(db, ctx, uuid, migration, "error")
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
        await roll_back(db, ctx, uuid, migration, "error")
        raise
