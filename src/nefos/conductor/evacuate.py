"""Evacuation, the conductor's part (Nova's ``ComputeTaskManager.rebuild_instance`` with
``recreate``): find the destination and hand the server to it.

Without a host the scheduler picks one, never the failed source (its ``ignore_hosts``); a host given
from 2.29 without ``force`` goes through the scheduler's filters (Nova's requested destination);
a forced one (or any given host before 2.29) skips them, and only its claim can refuse it. Either way
the destination's claim is made for the migration's uuid, so the server's own claim stays on the
source until the destination took the server. The migration gets its destination (host, node, IP);
then ``rebuild_instance`` is cast to the destination with the migration (``nefos.compute.host.evacuate``).

No valid host (or a forced host that is down): the server stays on its source in ERROR with the
reason as its fault, the migration ``error``, as Nova's conductor does.
"""

from __future__ import annotations

import contextlib
import logging
import traceback

from nefos import exceptions
from nefos.objects.migration_state import evacuation_of, with_migration
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, states

LOG = logging.getLogger(__name__)

CONDUCTOR_EVENT = "conductor_rebuild_server"  # Nova's event for a rebuild or an evacuation


async def give_up(db, ctx, uuid: str, migration: dict, exc: BaseException, *, set_error: bool) -> None:
    """The evacuation failed before any host acted: the destination's claim released, task_state
    None (ERROR with a fault when ``set_error``), the migration ``error``, the action failed."""
    await allocations.release(db, migration["uuid"])
    await migrations_obj.set_status(db, migration["uuid"], "error")
    try:
        instance = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        return
    current = evacuation_of(instance)
    if current is not None and current["uuid"] == migration["uuid"]:
        values = {"task_state": None, "system_metadata": with_migration(instance, None)}
        with contextlib.suppress(exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
            if set_error:
                await instance_obj.save_with_fault(db, uuid, dict(values, vm_state=states.ERROR), exc, host=None,
                                                   details="".join(traceback.format_exception(exc)),
                                                   expected_task_state=[states.REBUILDING])
            else:
                await instance_obj.save(db, uuid, values, expected_task_state=[states.REBUILDING])
    await actions.finish_action(db, ctx, uuid, message="Error")


async def evacuate_instance(conductor, ctx, uuid: str, request_spec: dict, migration: dict) -> None:
    from nefos.compute.live_migration import host_up
    db = conductor.rt.db
    event_id = await actions.event_start(db, ctx, uuid, CONDUCTOR_EVENT, None)
    forced = request_spec.get("force_hosts") or []
    try:
        if forced and not await host_up(conductor.rt, forced[0]):
            raise exceptions.NoValidHost(reason=f"The forced host {forced[0]} is down.")
        (selection,) = await conductor.scheduler.select_destinations(ctx, dict(request_spec), [migration["uuid"]])
    except exceptions.NoValidHost as exc:
        LOG.warning("instance %s: no host to evacuate it to: %s", uuid, exc)
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        return
    except BaseException as exc:
        await actions.event_finish(db, event_id, result="Error", traceback="".join(traceback.format_exception(exc)))
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        raise
    migration = dict(migration, dest_compute=selection["host"], dest_node=selection["node"])
    try:
        instance = await instance_obj.get(db, uuid)
        current = evacuation_of(instance)
        if current is None or current["uuid"] != migration["uuid"]:
            raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=[states.REBUILDING],
                                                      actual=instance["task_state"])
        await instance_obj.save(db, uuid, {"system_metadata": with_migration(instance, migration)},
                                expected_task_state=[states.REBUILDING])
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await allocations.release(db, migration["uuid"])
        await actions.event_finish(db, event_id, result="Error", details="instance deleted meanwhile")
        return
    await migrations_obj.set_destination(db, migration["uuid"], selection["host"], selection["node"])
    await actions.event_finish(db, event_id)
    try:
        await conductor.compute_rpcapi.rebuild_instance(ctx, selection["host"], uuid, instance.get("image_ref"),
                                                        instance["vm_state"] == states.STOPPED, migration=migration)
    except BaseException as exc:
        await give_up(db, ctx, uuid, migration, exc, set_error=True)
        raise
