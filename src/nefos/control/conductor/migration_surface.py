"""The conductor's methods for the compute hosts' steps of resizes and live migrations: each
writes in ONE transaction what the host's step did in one before (the instance's compare-and-swap
with its migration record, claims moved or released, the quota held by an upsize given back), so
no one sees the server and its migration disagree. Errors cross the bus by class, the instance goes
back as the ``Instance`` payload and a host's ``updates`` name only what a host may write, as
``nefos.control.conductor.host_surface``'s; ``fault`` is a host's ``faults.fault_of`` of its error."""

from __future__ import annotations

from sqlalchemy import update

from nefos.bus.payloads.instance import Instance, host_writable
from nefos.db.models import Allocation
from nefos.db.retry import retried
from nefos.objects import allocations, instance as instance_obj, migrations as migrations_obj, moves, quotas
from nefos.model.migration_state import quota_back
from nefos.control.conductor.host_surface import save_conditions
from nefos.model import state_machine


async def _claim_becomes_instance(s, instance_uuid: str, migration_uuid: str) -> None:
    """The instance's own claim is given back; the migration's claim becomes the instance's."""
    await allocations.release(None, instance_uuid, session=s)
    await s.execute(update(Allocation).where(Allocation.consumer_uuid == migration_uuid)
                    .values(consumer_uuid=instance_uuid).execution_options(synchronize_session=False))


async def _one_transaction(db, step):
    """``step(s)`` in one transaction, run again when the database rolled it back for contention
    (the steps of several moves off one host release claims on its node together: MariaDB can
    pick one of them as a deadlock's victim) or lost the connection."""
    async def attempt():
        async with db.transaction() as s:
            return await step(s)
    return await retried(attempt)


class MigrationSurface:
    """Mixed into the conductor's manager (``self.rt``: the conductor's runtime)."""

    async def migration_save(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str,
                             migration_status: str, **expected) -> dict:
        """Save the instance (compare-and-swap) and set its migration's status, together."""
        db = self.rt.db

        async def step(s):
            instance = Instance(await instance_obj.save(db, instance_uuid, host_writable(updates), session=s,
                                                         **save_conditions(expected)))
            await migrations_obj.set_status(db, migration_uuid, migration_status, session=s)
            return instance
        return await _one_transaction(db, step)

    async def migration_abort_before_move(self, ctx, instance_uuid: str, migration: dict, fault: dict | None = None,
                                          host_name: str | None = None, details: str | None = None) -> None:
        """Undo a resize that never moved the guest (the destination's claim, the upsize quota, the
        migration ``error``; task_state None, with ``fault``); finish the action as failed."""
        await moves.abort_resize_before_move(self.rt.db, ctx, instance_uuid, migration, fault, host=host_name,
                                             details=details)

    async def resize_confirmed(self, ctx, instance_uuid: str, updates: dict, migration: dict, **expected) -> dict:
        """On the source's confirm: save the instance, the destination's claim becomes its claim, the
        quota held beyond the new flavor is given back, the migration ``confirmed``."""
        db = self.rt.db

        async def step(s):
            instance = Instance(await instance_obj.save(db, instance_uuid, host_writable(updates), session=s,
                                                         **save_conditions(expected)))
            await _claim_becomes_instance(s, instance_uuid, migration["uuid"])
            await quotas.release(s, instance["project_id"], quota_back(migration, migration["new_flavor"]))
            await migrations_obj.set_status(db, migration["uuid"], "confirmed", session=s)
            return instance
        return await _one_transaction(db, step)

    async def resize_reverted_at_destination(self, ctx, instance_uuid: str, source_host: str, source_node: str,
                                             migration_uuid: str) -> None:
        """On the destination's revert: the server's host is the source again (compare-and-swap on
        ``resize_reverting``), the destination's claim is released."""
        db = self.rt.db

        async def step(s):
            await instance_obj.save(db, instance_uuid, **state_machine.step_save(
                "revertResize.at_destination", host=source_host, node=source_node), session=s)
            await allocations.release(db, migration_uuid, session=s)
        await _one_transaction(db, step)

    async def resize_revert_finished(self, ctx, instance_uuid: str, updates: dict, migration: dict,
                                     old_flavor: dict, **expected) -> dict:
        """On the source's finish of a revert: save the instance, give back the quota held beyond the
        old flavor, the migration ``reverted``."""
        db = self.rt.db

        async def step(s):
            instance = Instance(await instance_obj.save(db, instance_uuid, host_writable(updates), session=s,
                                                         **save_conditions(expected)))
            await quotas.release(s, instance["project_id"], quota_back(migration, old_flavor))
            await migrations_obj.set_status(db, migration["uuid"], "reverted", session=s)
            return instance
        return await _one_transaction(db, step)

    async def live_migration_roll_back(self, ctx, instance_uuid: str, migration: dict, status: str,
                                       fault: dict | None = None, host_name: str | None = None,
                                       details: str | None = None) -> None:
        """Undo a live migration that never moved the guest (the destination's claim, task_state
        None, the migration ``status``, with ``fault``); finish the action as failed."""
        await moves.roll_back_live_migration(self.rt.db, ctx, instance_uuid, migration, status, fault,
                                             host=host_name, details=details)

    async def live_migration_completed(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str,
                                       **expected) -> dict:
        """On the destination: save the instance (now this host's), the migration's claim becomes
        its claim (the source's released), the migration ``completed``."""
        return await self._moved_here(instance_uuid, updates, migration_uuid, "completed", expected)

    async def evacuation_done(self, ctx, instance_uuid: str, updates: dict, migration_uuid: str,
                              **expected) -> dict:
        """On an evacuation's destination: save the instance (now this host's), the migration's claim
        becomes its claim (the source's released), the migration ``done`` (Nova's finish_evacuation;
        the source completes it when it comes back)."""
        return await self._moved_here(instance_uuid, updates, migration_uuid, "done", expected)

    async def _moved_here(self, instance_uuid: str, updates: dict, migration_uuid: str, migration_status: str,
                          expected: dict) -> dict:
        db = self.rt.db

        async def step(s):
            instance = Instance(await instance_obj.save(db, instance_uuid, host_writable(updates), session=s,
                                                         **save_conditions(expected)))
            await _claim_becomes_instance(s, instance_uuid, migration_uuid)
            await migrations_obj.set_status(db, migration_uuid, migration_status, session=s)
            return instance
        return await _one_transaction(db, step)

    async def migrations_of_host(self, ctx, migration_type: str, statuses: list[str],
                                 source_compute: str | None = None, dest_compute: str | None = None) -> list[dict]:
        """Migrations of ``migration_type`` in ``statuses`` from ``source_compute`` or to
        ``dest_compute`` (a restarted host's evacuations), oldest first."""
        rows = await migrations_obj.by_host_and_type(self.rt.db, migration_type, tuple(statuses),
                                                     source_compute=source_compute, dest_compute=dest_compute)
        return [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()} for row in rows]
