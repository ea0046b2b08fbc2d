"""Server groups (instance groups): a name, one policy, and member instances.

``server_groups`` quota is consumed in the creating project and released on
delete. ``server_group_members`` is, as in Nova, a limit per group: pass the
project's limit to ``add_member`` and it refuses to grow the group past it.
"""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import delete, func, insert, literal, select

from nefos import exceptions
from nefos.db.models import Allocation, ComputeNode, Instance, InstanceGroup, InstanceGroupMember
from nefos.objects import quotas

POLICIES = ("anti-affinity", "affinity", "soft-anti-affinity", "soft-affinity")


def _to_dict(row: InstanceGroup, members: list[str]) -> dict:
    return {"id": row.id, "uuid": row.uuid, "name": row.name, "policy": row.policy,
            "rules": dict(row.rules or {}), "project_id": row.project_id, "user_id": row.user_id,
            "members": members, "created_at": row.created_at}


async def _members(session, group_ids: list[int]) -> dict[int, list[str]]:
    """Each group's members whose instance exists and is not deleted (as Nova shows them)."""
    result: dict[int, list[str]] = {g: [] for g in group_ids}
    if not group_ids:
        return result
    rows = (await session.execute(
        select(InstanceGroupMember.group_id, InstanceGroupMember.instance_uuid)
        .join(Instance, Instance.uuid == InstanceGroupMember.instance_uuid)
        .where(InstanceGroupMember.group_id.in_(group_ids), Instance.deleted == 0)
        .order_by(InstanceGroupMember.id))).all()
    for group_id, uuid in rows:
        result[group_id].append(uuid)
    return result


async def _get_row(session, group_uuid: str) -> InstanceGroup:
    row = (await session.execute(select(InstanceGroup).where(
        InstanceGroup.uuid == group_uuid))).scalar_one_or_none()
    if row is None:
        raise exceptions.InstanceGroupNotFound(group_uuid=group_uuid)
    return row


async def get_group(db, group_uuid) -> dict:
    """The group (uuid, name, policy, rules, project_id, user_id, members: [instance uuids])."""
    async with db.reader() as s:
        row = await _get_row(s, group_uuid)
        members = await _members(s, [row.id])
    return _to_dict(row, members[row.id])


async def groups_of(db, instance_uuid: str) -> list[str]:
    """The uuids of the groups the server is a member of (at most one, as in Nova)."""
    async with db.reader() as s:
        rows = (await s.execute(select(InstanceGroup.uuid).join(
            InstanceGroupMember, InstanceGroupMember.group_id == InstanceGroup.id)
            .where(InstanceGroupMember.instance_uuid == instance_uuid))).scalars().all()
    return list(rows)


async def member_placements(db, group_uuid: str) -> list[dict]:
    """Where each live member of the group is, or is about to be.

    A member's host is the host of its resource claim when it has one (the
    scheduler claims before the build is even cast, so racing boots see each
    other here), else its recorded host; members placed nowhere are left out.
    Returns ``[{"uuid", "host", "claim_id"}]``; claim ids grow with the claims'
    order, so of two racing members the one with the smaller id was placed first.
    """
    async with db.reader() as s:
        rows = (await s.execute(
            select(Instance.uuid, Instance.host, Allocation.id, ComputeNode.host)
            .join(InstanceGroupMember, InstanceGroupMember.instance_uuid == Instance.uuid)
            .join(InstanceGroup, InstanceGroup.id == InstanceGroupMember.group_id)
            .outerjoin(Allocation, Allocation.consumer_uuid == Instance.uuid)
            .outerjoin(ComputeNode, ComputeNode.id == Allocation.compute_node_id)
            .where(InstanceGroup.uuid == group_uuid, Instance.deleted == 0))).all()
    return [{"uuid": uuid, "host": claim_host or host, "claim_id": claim_id}
            for uuid, host, claim_id, claim_host in rows if claim_host or host]


async def list_groups(db, project_id: str | None = None) -> list[dict]:
    """A project's groups, or every group when ``project_id`` is None."""
    q = select(InstanceGroup).order_by(InstanceGroup.id)
    if project_id is not None:
        q = q.where(InstanceGroup.project_id == project_id)
    async with db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
        members = await _members(s, [r.id for r in rows])
    return [_to_dict(r, members[r.id]) for r in rows]


async def create_group(db, cfg, *, name: str, policy: str, project_id: str | None, user_id: str | None,
                       rules: dict | None = None) -> dict:
    if policy not in POLICIES:
        raise exceptions.ValidationError(f"Invalid server group policy {policy}")
    async with db.transaction() as s:
        try:
            await quotas.consume(s, cfg, project_id, {"server_groups": 1})
        except exceptions.OverQuota:
            raise exceptions.ServerGroupLimitExceeded()
        row = InstanceGroup(uuid=str(uuidlib.uuid4()), name=name, policy=policy, rules=rules or {},
                            project_id=project_id, user_id=user_id)
        s.add(row)
        await s.flush()
    return _to_dict(row, [])


async def delete_group(db, group_uuid: str) -> None:
    async with db.transaction() as s:
        row = await _get_row(s, group_uuid)
        await s.execute(delete(InstanceGroupMember).where(InstanceGroupMember.group_id == row.id))
        await s.execute(delete(InstanceGroup).where(InstanceGroup.id == row.id))
        await quotas.release(s, row.project_id, {"server_groups": 1})


async def member_limit(session, cfg, project_id: str | None) -> int:
    """The project's ``server_group_members`` limit (-1: unlimited)."""
    if not project_id:
        return -1
    return (await quotas.limits(session, cfg, project_id))["server_group_members"]


async def add_member(session, group_uuid: str, instance_uuid: str, limit: int | None = None) -> None:
    """Add ``instance_uuid`` to the group inside the caller's transaction (idempotent).

    With ``limit`` >= 0 the insert is conditional on the group having fewer
    members than that, else ServerGroupMembersLimitExceeded (403).
    """
    row = await _get_row(session, group_uuid)
    already = (await session.execute(select(InstanceGroupMember.id).where(
        InstanceGroupMember.group_id == row.id, InstanceGroupMember.instance_uuid == instance_uuid))).first()
    if already:
        return
    source = select(literal(row.id), literal(instance_uuid))
    if limit is not None and limit >= 0:
        count = (select(func.count(InstanceGroupMember.id))
                 .where(InstanceGroupMember.group_id == row.id).scalar_subquery())
        source = source.where(count < limit)
    result = await session.execute(
        insert(InstanceGroupMember).from_select(["group_id", "instance_uuid"], source))
    if result.rowcount != 1:
        raise exceptions.ServerGroupMembersLimitExceeded()


async def remove_member(session, group_uuid: str, instance_uuid: str) -> None:
    """Remove ``instance_uuid`` from the group inside the caller's transaction (no error if absent)."""
    group_id = select(InstanceGroup.id).where(InstanceGroup.uuid == group_uuid).scalar_subquery()
    await session.execute(delete(InstanceGroupMember).where(
        InstanceGroupMember.group_id == group_id, InstanceGroupMember.instance_uuid == instance_uuid))
