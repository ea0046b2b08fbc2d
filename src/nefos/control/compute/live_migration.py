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

import logging
import uuid as uuidlib

from nefos import exceptions
from nefos.objects import actions, migrations as migrations_obj, moves
from nefos.model import state_machine
from nefos.model.migration_state import LIVE_MIGRATION

LOG = logging.getLogger(__name__)

# Instance actions and events (Nova's names; the migration type LIVE_MIGRATION is migration_state's).
LIVE_MIGRATION_CANCEL = "live_migration_cancel"
LIVE_MIGRATION_FORCE_COMPLETE = "live_migration_force_complete"


# API layer ---------------------------------------------------------------------------------------
async def request(api, ctx, uuid: str, *, host: str | None, block_migration: bool | None,
                  force: bool | None, async_: bool) -> None:
    """``force``: None before 2.30 (a given host is taken as is), else whether to skip the filters."""
    rt = api.rt
    instance = await api.get(ctx, uuid)
    api.check_lock(ctx, instance)
    state_machine.check(LIVE_MIGRATION, instance)
    if host is not None:
        await api.host_zone(host)  # 400 when there is no such compute host (Nova's ComputeHostNotFound)
    flavor = instance.get("flavor") or {}
    migration = {
        "uuid": str(uuidlib.uuid4()), "type": LIVE_MIGRATION, "status": "accepted",
        "source_compute": instance["host"], "source_node": instance["node"], "dest_compute": host,
        "dest_node": None, "old_flavor": flavor, "new_flavor": flavor, "old_vm_state": instance["vm_state"],
        "block_migration": block_migration,
    }
    await moves.begin_move(rt.db, ctx, instance, migration, operation=LIVE_MIGRATION, requested_host=host)
    spec = moves.request_spec(instance, flavor, host=host, force=force)
    forced_host = spec["force_hosts"][0] if spec["force_hosts"] else None
    try:
        await api.conductor.live_migrate_instance(ctx, uuid, spec, migration, forced_host, async_=async_)
    except (exceptions.NoValidHost, exceptions.ComputeServiceUnavailable, exceptions.HypervisorUnavailable) as exc:
        raise exceptions.Invalid(str(exc)) from None
    except exceptions.Invalid:
        raise
    except BaseException:
        # The conductor undoes what it began; this covers a request that never reached it.
        await moves.roll_back_live_migration(rt.db, ctx, uuid, migration, "error")
        raise


async def _in_progress(api, ctx, uuid: str, migration_id: str, operation: str, allowed: tuple[str, ...],
                       *, missing_is_bad_request: bool) -> tuple[dict, dict]:
    instance = await api.get(ctx, uuid)
    api.check_lock(ctx, instance)
    state_machine.check(operation, instance)
    method = state_machine.operation(operation).name
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
    instance, row = await _in_progress(api, ctx, uuid, migration_id, LIVE_MIGRATION_FORCE_COMPLETE, ("running",),
                                       missing_is_bad_request=True)
    await actions.record_action(api.rt.db, ctx, uuid, LIVE_MIGRATION_FORCE_COMPLETE)
    await api.compute_rpcapi.live_migration_force_complete(ctx, row["source_compute"], uuid, row["uuid"])
    await actions.finish_action(api.rt.db, ctx, uuid)


async def abort(api, ctx, uuid: str, migration_id: str, *, queued_too: bool) -> None:
    """Nova's live_migrate_abort: a running live migration (from 2.65 a queued or preparing one too)."""
    allowed = ("running", "queued", "preparing") if queued_too else ("running",)
    instance, row = await _in_progress(api, ctx, uuid, migration_id, LIVE_MIGRATION_CANCEL, allowed,
                                       missing_is_bad_request=False)
    await actions.record_action(api.rt.db, ctx, uuid, LIVE_MIGRATION_CANCEL)
    await api.compute_rpcapi.live_migration_abort(ctx, row["source_compute"], uuid, row["uuid"])
    await actions.finish_action(api.rt.db, ctx, uuid)
