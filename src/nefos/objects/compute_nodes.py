"""A compute host's node rows: its identity, its capacity and its build-failure count (the
writes the host's resource tracker asks the conductor for)."""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import select, update

from nefos.db.models import ComputeNode
from nefos.objects import allocations


async def identity(db, host: str, recorded: str | None) -> dict:
    """The node uuids recorded for ``host``, and which host owns the node ``recorded`` (if any)."""
    async with db.reader() as s:
        mine = (await s.execute(select(ComputeNode.uuid).where(
            ComputeNode.host == host, ComputeNode.deleted == 0))).scalars().all()
        owner = None
        if recorded:
            owner = (await s.execute(select(ComputeNode.host).where(
                ComputeNode.uuid == recorded, ComputeNode.deleted == 0))).scalar_one_or_none()
    return {"node_uuids": list(mine), "owner_of_recorded": owner}


_USAGE = ("vcpus_used", "memory_mb_used", "local_gb_used", "running_vms")


async def update_capacity(db, host: str, node: str, node_uuid: str | None, capacity: dict, *,
                          heal_usage: bool = False) -> dict:
    """Create or update the node's row with the driver's ``capacity``; returns its id, whether it
    counts build failures and its usage as the row had it (``heal_usage``: recount its usage from
    its allocations)."""
    async with db.transaction() as s:
        row = (await s.execute(select(ComputeNode).where(
            ComputeNode.host == host, ComputeNode.hypervisor_hostname == node,
            ComputeNode.deleted == 0))).scalar_one_or_none()
        if row is None:
            row = ComputeNode(uuid=node_uuid or str(uuidlib.uuid4()), host=host, hypervisor_hostname=node,
                              **capacity)
            s.add(row)
            await s.flush()
        else:
            # Only what changed: an unchanged report (every minute from every host) writes nothing,
            # so the row's updated_at, which schedulers re-read nodes by, moves only with a change.
            changed = {key: value for key, value in capacity.items() if getattr(row, key) != value}
            if changed:
                await s.execute(update(ComputeNode).where(ComputeNode.id == row.id).values(**changed))
        if heal_usage:
            await allocations.recount(s, row.id)
        return {"id": row.id, "failed_builds": row.failed_builds or 0,
                **{key: getattr(row, key) for key in _USAGE}}


async def record_build_result(db, node_id: int, success: bool) -> None:
    """A success resets the node's consecutive build failures, a failure counts one more."""
    values = {"failed_builds": 0} if success else {"failed_builds": ComputeNode.failed_builds + 1}
    async with db.transaction() as s:
        await s.execute(update(ComputeNode).where(ComputeNode.id == node_id).values(**values))
