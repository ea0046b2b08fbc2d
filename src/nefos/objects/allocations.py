"""Resource claims against compute nodes.

A claim is one row in ``allocations`` plus one conditional UPDATE of the
node's used counters that succeeds only while the node stays within its
capacity times its allocation ratio. Both happen in the caller's
transaction, so concurrent claims can never overcommit a node, on any
backend. ``release`` is idempotent.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, func, insert, select, update

from nefos.db.models import Allocation, ComputeNode
from nefos.db.retry import retried
from nefos.db.session import Database, given_or

NODES = ComputeNode.__table__
ALLOCATIONS = Allocation.__table__

# Built once (every boot claims and every delete releases); values are bound per call.
_CLAIM = (
    update(NODES)
    .where(NODES.c.id == bindparam("b_node_id"), NODES.c.deleted == 0,
           NODES.c.vcpus_used + bindparam("b_vcpus") <= NODES.c.vcpus * NODES.c.cpu_allocation_ratio,
           NODES.c.memory_mb_used + bindparam("b_memory_mb") <= NODES.c.memory_mb * NODES.c.ram_allocation_ratio,
           NODES.c.local_gb_used + bindparam("b_disk_gb") <= NODES.c.local_gb * NODES.c.disk_allocation_ratio)
    .values(vcpus_used=NODES.c.vcpus_used + bindparam("b_vcpus"),
            memory_mb_used=NODES.c.memory_mb_used + bindparam("b_memory_mb"),
            local_gb_used=NODES.c.local_gb_used + bindparam("b_disk_gb"),
            running_vms=NODES.c.running_vms + 1))
_INSERT = insert(ALLOCATIONS)
_BY_CONSUMER = select(ALLOCATIONS).where(ALLOCATIONS.c.consumer_uuid == bindparam("b_consumer"))
_DELETE = delete(ALLOCATIONS).where(ALLOCATIONS.c.id == bindparam("b_id"))
_GIVE_BACK = (
    update(NODES).where(NODES.c.id == bindparam("b_node_id"))
    .values(vcpus_used=NODES.c.vcpus_used - bindparam("b_vcpus"),
            memory_mb_used=NODES.c.memory_mb_used - bindparam("b_memory_mb"),
            local_gb_used=NODES.c.local_gb_used - bindparam("b_disk_gb"),
            running_vms=NODES.c.running_vms - 1))


async def claim(session, consumer_uuid: str, node_id: int, *, vcpus: int, memory_mb: int,
                disk_gb: int) -> bool:
    """Claim resources on ``node_id`` for ``consumer_uuid``; False when they don't fit."""
    amounts = {"b_vcpus": vcpus, "b_memory_mb": memory_mb, "b_disk_gb": disk_gb}
    result = await session.execute(_CLAIM, {"b_node_id": node_id, **amounts})
    if result.rowcount != 1:
        return False
    await session.execute(_INSERT, {"consumer_uuid": consumer_uuid, "compute_node_id": node_id,
                                    "vcpus": vcpus, "memory_mb": memory_mb, "disk_gb": disk_gb})
    return True


async def recount(session, node_id: int) -> None:
    """Set ``node_id``'s usage counters to the sum of its allocations (a host's start-up heal).

    The node's row is locked first: a claim or a release changes the counters and its allocation
    in one transaction, so one that committed is summed, and one still running finds the row
    locked and applies its change on top of the recount, never under it."""
    await session.execute(select(NODES.c.id).where(NODES.c.id == node_id).with_for_update())
    vcpus, memory_mb, disk_gb, count = (await session.execute(select(
        func.coalesce(func.sum(ALLOCATIONS.c.vcpus), 0), func.coalesce(func.sum(ALLOCATIONS.c.memory_mb), 0),
        func.coalesce(func.sum(ALLOCATIONS.c.disk_gb), 0), func.count(ALLOCATIONS.c.id),
    ).where(ALLOCATIONS.c.compute_node_id == node_id))).one()
    await session.execute(update(NODES).where(NODES.c.id == node_id).values(
        vcpus_used=vcpus, memory_mb_used=memory_mb, local_gb_used=disk_gb, running_vms=count))


async def release(db: Database, consumer_uuid: str, session=None) -> bool:
    """Give back the consumer's claim, if it has one."""
    async def _release(s) -> bool:
        alloc = (await s.execute(_BY_CONSUMER, {"b_consumer": consumer_uuid})).mappings().one_or_none()
        if alloc is None:
            return False
        deleted = await s.execute(_DELETE, {"b_id": alloc["id"]})
        if deleted.rowcount != 1:
            return False
        await s.execute(_GIVE_BACK, {"b_node_id": alloc["compute_node_id"], "b_vcpus": alloc["vcpus"],
                                     "b_memory_mb": alloc["memory_mb"], "b_disk_gb": alloc["disk_gb"]})
        return True

    if session is not None:
        return await _release(session)

    async def own_transaction() -> bool:
        async with db.transaction() as s:
            return await _release(s)
    # Several releases on one node at once (a host's servers deleted or moved together) can
    # deadlock on MariaDB: the victim runs again.
    return await retried(own_transaction)


async def transfer(session, from_consumer: str, to_consumer: str) -> None:
    """The claim of ``from_consumer`` (a migration) becomes ``to_consumer``'s (its instance), in the
    caller's transaction; the node's usage is unchanged."""
    await session.execute(update(ALLOCATIONS).where(ALLOCATIONS.c.consumer_uuid == from_consumer)
                          .values(consumer_uuid=to_consumer))


async def get(db: Database, consumer_uuid: str, *, session=None) -> dict | None:
    async with given_or(session, db.reader) as s:
        row = (await s.execute(_BY_CONSUMER, {"b_consumer": consumer_uuid})).mappings().one_or_none()
    return dict(row) if row else None
