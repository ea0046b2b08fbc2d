"""The conductor's step of a live migration (Nova's ``LiveMigrationTask``: check the hosts, claim
on the destination, cast to the source; the API's steps are ``nefos.control.compute.live_migration``, the
hosts' ``nefos.host.compute.live_migration``)."""

from __future__ import annotations

import traceback

from nefos import exceptions
from nefos.objects import actions
from nefos.objects.moves import record_destination, roll_back_live_migration as roll_back
from nefos.objects.service_rows import host_up

CONDUCTOR_EVENT = "conductor_live_migrate_instance"  # Nova's event name


async def live_migrate(conductor, ctx, uuid: str, request_spec: dict, migration: dict,
                                 forced_host: str | None) -> None:
    """Check the hosts, claim on the destination (consumer: the migration), have the destination's
    driver check it can take the guest, then cast the migration to the source."""
    rt = conductor.rt
    db = rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    source = migration["source_compute"]
    try:
        if not source or not await host_up(db, rt.cfg, source):
            raise exceptions.ComputeServiceUnavailable(host=source)
        if forced_host is not None:
            if forced_host == source:
                raise exceptions.UnableToMigrateToSelf(instance_id=uuid, host=source)
            if not await host_up(db, rt.cfg, forced_host):
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
    recorded = await record_destination(db, uuid, migration, selection, event_id, step="live-migration.scheduled")
    if recorded is None:
        return
    migration, _ = recorded
    try:
        await conductor.compute_rpcapi.live_migration(ctx, source, uuid, migration)
    except BaseException:
        await roll_back(db, ctx, uuid, migration, "error")
        raise
