"""Moving a server between hosts: the control plane's steps shared by a resize (or cold migration),
a live migration and an evacuation.

Each move is a migration record that the API writes into the server's system metadata
(``migration_state``) with a claim on the destination made for the migration's own uuid. Two steps
are the same for every kind of move:

- ``record_destination``: once the scheduler chose a host, the migration in the server's metadata
  and the migration row get it, by compare-and-swap on the move's task state; a server deleted or
  reset meanwhile drops the destination's claim and ends the conductor's event.
- ``undo_move``: a move that never moved the guest gives back the destination's claim, clears the
  migration from the server (task state None), sets the migration's status and, when an error is
  given, records it as the server's fault — as Nova's conductor and compute rollbacks do. A server
  that no longer holds this migration (deleted, or the move already undone or finished) is left
  alone: its delete or the finished move gave everything back.
"""

from __future__ import annotations

import traceback

from nefos import exceptions
from nefos.objects import actions, allocations, instance as instance_obj, migrations as migrations_obj, quotas
from nefos.model import state_machine, states
from nefos.model.migration_state import migration_of, quota_back, with_migration


def _holds(instance: dict, migration: dict) -> dict | None:
    current = migration_of(instance)
    return current if current and current.get("uuid") == migration["uuid"] else None


def request_spec(instance: dict, flavor: dict, *, host: str | None, force: bool | None) -> dict:
    """What the scheduler is asked for a server's move off its host (an evacuation, a live
    migration) to ``host`` (None: the scheduler's choice). A given host is taken as is when
    ``force`` is not False (None: a request older than the microversion that added ``force``), else
    it is the requested destination the filters check (Nova's force semantics). The source host is
    never a candidate (Nova's ignore_hosts, as a first attempt's retry record)."""
    forced_host = host if host is not None and force is not False else None
    spec = {
        "flavor": flavor, "image": {"id": instance.get("image_ref"), "properties": {}},
        "project_id": instance["project_id"], "user_id": instance["user_id"],
        "availability_zone": instance.get("pinned_availability_zone"),
        "force_hosts": [forced_host] if forced_host else [], "scheduler_hints": {}, "instance_group": None,
        "num_instances": 1,
        "retry": {"num_attempts": 0, "hosts": [[instance.get("host"), instance.get("node")]]},
    }
    if host is not None and not forced_host:
        spec["requested_destination"] = {"host": host, "node": None}
    return spec


async def begin_move(db, ctx, instance: dict, migration: dict, *, operation: str,
                     requested_host: str | None) -> None:
    """The API's step of any move, in one transaction: the server takes the task_state the state
    table's ``operation`` sets and the migration (compare-and-swap on the states it is allowed
    from; a server changed meanwhile is InstanceInvalidState), the migration row (with the
    requested destination, if any) and the operation's instance action are written."""
    uuid = instance["uuid"]
    op = state_machine.operation(operation)
    async with db.transaction() as s:
        try:
            await instance_obj.save(db, uuid, {"task_state": op.sets,
                                               "system_metadata": with_migration(instance, migration)},
                                    **state_machine.allowed_from(operation), session=s)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceInvalidState):
            raise exceptions.InstanceInvalidState(action=op.name, instance_uuid=uuid, attr="task_state",
                                                  state="changed") from None
        await migrations_obj.create(s, migration, instance, ctx)
        if requested_host is not None:
            await migrations_obj.update_record(None, migration["uuid"], session=s, dest_compute=requested_host)
        await actions.record_action(db, ctx, uuid, op.action, session=s)


async def record_destination(db, uuid: str, migration: dict, selection: dict, event_id: int, *,
                             step: str) -> tuple[dict, dict] | None:
    """The scheduler's ``selection`` recorded as ``migration``'s destination; (the migration, the
    instance) — or None when the server no longer holds this move (its claim released, the event
    ended with an error)."""
    migration = dict(migration, dest_compute=selection["host"], dest_node=selection["node"])
    try:
        instance = await instance_obj.get(db, uuid)
        if _holds(instance, migration) is None:
            raise exceptions.UnexpectedTaskStateError(instance_uuid=uuid, expected=state_machine.expects(step),
                                                      actual=instance["task_state"])
        await instance_obj.save(db, uuid, **state_machine.step_save(
            step, system_metadata=with_migration(instance, migration)))
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        await allocations.release(db, migration["uuid"])
        await actions.event_finish(db, event_id, result="Error", details="instance deleted meanwhile")
        return None
    await migrations_obj.set_destination(db, migration["uuid"], selection["host"], selection["node"])
    await actions.event_finish(db, event_id)
    return migration, instance


async def undo_move(db, ctx, uuid: str, migration: dict, *, step: str, status: str,
                    exc: BaseException | dict | None = None, host: str | None = None, details: str | None = None,
                    values: dict | None = None, give_back_upsize: bool = False) -> None:
    """Undo a move that never moved the guest (see the module's docstring). ``values``: more
    columns for the server (an evacuation that failed sets ERROR); ``give_back_upsize``: a resize's
    quota for the bigger flavor is released; ``exc``: an error, or a compute host's description of
    one (``faults.fault_of``), recorded as the server's fault."""
    await allocations.release(db, migration["uuid"])
    try:
        instance = await instance_obj.get(db, uuid)
    except exceptions.InstanceNotFound:
        await migrations_obj.set_status(db, migration["uuid"], status)
        return
    current = _holds(instance, migration)
    if current is None:
        return
    try:
        async with db.transaction() as s:
            await instance_obj.save(db, uuid, **state_machine.step_save(
                step, **(values or {}), system_metadata=with_migration(instance, None)), session=s)
            if give_back_upsize:
                await quotas.release(s, instance["project_id"], quota_back(current, current["old_flavor"]))
            await migrations_obj.set_status(db, migration["uuid"], status, session=s)
            if exc is not None:
                await instance_obj.add_fault(db, uuid, exc, host=host, session=s, details=details or (
                    None if isinstance(exc, dict) else "".join(traceback.format_exception(exc))))
    except (exceptions.InstanceNotFound, exceptions.UnexpectedTaskStateError):
        pass  # deleted meanwhile: the delete gives everything back
    await actions.finish_action(db, ctx, uuid, message="Error")


async def abort_resize_before_move(db, ctx, uuid: str, migration: dict, exc: BaseException | dict | None = None, *,
                                   host: str | None = None, details: str | None = None) -> None:
    """A resize or cold migration undone before the guest moved; the migration ``error`` (Nova's)."""
    await undo_move(db, ctx, uuid, migration, step="resize.not_moved",
                    status="error", exc=exc, host=host, details=details, give_back_upsize=True)


async def roll_back_live_migration(db, ctx, uuid: str, migration: dict, status: str,
                                   exc: BaseException | dict | None = None, *, host: str | None = None,
                                   details: str | None = None) -> None:
    """A live migration undone before the guest moved; vm_state as it was, progress 0."""
    await undo_move(db, ctx, uuid, migration, step="live-migration.rolled_back", status=status, exc=exc, host=host,
                    details=details, values={"progress": 0})


async def give_up_evacuation(db, ctx, uuid: str, migration: dict, exc: BaseException, *, set_error: bool) -> None:
    """An evacuation that failed before any host acted: the server stays on its source (ERROR with
    the reason as its fault when ``set_error``, as Nova's conductor leaves it), the migration ``error``."""
    await undo_move(db, ctx, uuid, migration, step="evacuate.not_scheduled", status="error",
                    exc=exc if set_error else None, values={"vm_state": states.ERROR} if set_error else None)
