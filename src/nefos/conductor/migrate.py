"""The conductor's step of a resize or cold migration (Nova's ``ComputeTaskManager._cold_migrate``;
the API's steps are ``nefos.compute.resize``, the hosts' ``nefos.compute.host.resize``)."""

from __future__ import annotations

import traceback

from nefos import exceptions
from nefos.compute.resize import abort_before_move
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, states
from nefos.objects.migration_state import with_migration as _with_migration

CONDUCTOR_EVENT = "conductor_migrate_server"


async def migrate_server(conductor, ctx, uuid: str, request_spec: dict, migration: dict) -> None:
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
