"""The conductor's step of a resize or cold migration (Nova's ``ComputeTaskManager._cold_migrate``;
the API's steps are ``nefos.control.compute.resize``, the hosts' ``nefos.host.compute.resize``)."""

from __future__ import annotations

import traceback

from nefos import exceptions
from nefos.objects import actions, allocations
from nefos.objects.moves import abort_resize_before_move as abort_before_move, record_destination

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
    recorded = await record_destination(db, uuid, migration, selection, event_id, step="resize.scheduled")
    if recorded is None:
        return
    migration, _ = recorded
    try:
        await conductor.compute_rpcapi.prep_resize(ctx, selection["host"], uuid, migration)
    except (exceptions.InstanceNotFound, exceptions.UnexpectedDeletingTaskStateError):
        await allocations.release(db, migration["uuid"])
    except BaseException:
        await abort_before_move(db, ctx, uuid, migration, None)
        raise
