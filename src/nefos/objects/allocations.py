"""Resource claims against compute nodes.

A claim is one row in ``allocations`` plus one conditional UPDATE of the
node's used counters that succeeds only while the node stays within its
capacity times its allocation ratio. Both happen in the caller's
transaction, so concurrent claims can never overcommit a node, on any
backend. ``release`` is idempotent.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update

from nefos.db.models import Allocation, ComputeNode
from nefos.db.session import Database


async def claim(session, consumer_uuid: str, node_id: int, *, vcpus: int, memory_mb: int,
                disk_gb: int) -> bool:
    """Claim resources on ``node_id`` for ``consumer_uuid``; False when they don't fit."""
    result = await session.execute(
        update(ComputeNode)
        .where(ComputeNode.id == node_id, ComputeNode.deleted == 0,
               ComputeNode.vcpus_used + vcpus <= ComputeNode.vcpus * ComputeNode.cpu_allocation_ratio,
               ComputeNode.memory_mb_used + memory_mb <= ComputeNode.memory_mb * ComputeNode.ram_allocation_ratio,
               ComputeNode.local_gb_used + disk_gb <= ComputeNode.local_gb * ComputeNode.disk_allocation_ratio)
        .values(vcpus_used=ComputeNode.vcpus_used + vcpus,
                memory_mb_used=ComputeNode.memory_mb_used + memory_mb,
                local_gb_used=ComputeNode.local_gb_used + disk_gb,
                running_vms=ComputeNode.running_vms + 1)
        .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        return False
    session.add(Allocation(consumer_uuid=consumer_uuid, compute_node_id=node_id, vcpus=vcpus,
                           memory_mb=memory_mb, disk_gb=disk_gb))
    await session.flush()
    return True


async def release(db: Database, consumer_uuid: str, session=None) -> bool:
    """Give back the consumer's claim, if it has one."""
    async def _release(s) -> bool:
        alloc = (await s.execute(select(Allocation).where(
            Allocation.consumer_uuid == consumer_uuid))).scalar_one_or_none()
        if alloc is None:
            return False
        deleted = await s.execute(delete(Allocation).where(Allocation.id == alloc.id)
                                  .execution_options(synchronize_session=False))
        if deleted.rowcount != 1:
            return False
        await s.execute(update(ComputeNode).where(ComputeNode.id == alloc.compute_node_id).values(
            vcpus_used=ComputeNode.vcpus_used - alloc.vcpus,
            memory_mb_used=ComputeNode.memory_mb_used - alloc.memory_mb,
            local_gb_used=ComputeNode.local_gb_used - alloc.disk_gb,
            running_vms=ComputeNode.running_vms - 1).execution_options(synchronize_session=False))
        return True

    if session is not None:
        return await _release(session)
    async with db.transaction() as s:
        return await _release(s)


async def get(db: Database, consumer_uuid: str) -> dict | None:
    async with db.reader() as s:
        row = (await s.execute(select(Allocation).where(
            Allocation.consumer_uuid == consumer_uuid))).scalar_one_or_none()
        return row.to_dict() if row else None
