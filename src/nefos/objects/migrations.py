"""Migration records: one row per resize or cold migration (Nova's ``migrations`` table).

The resize pipeline (``nefos.control.compute.resize``) keeps its working copy of a migration in the
server's system metadata; this table is the durable record the os-migrations API reads, written
at the points Nova sets each status (the statuses are Nova's). A status update touches only a
row that is not deleted, so a record soft-deleted with its server stays as it was.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, insert, or_, select, update

from nefos import exceptions
from nefos.db.models import ComputeNode, Migration, utcnow
from nefos.db.session import Database

MIGRATIONS = Migration.__table__

# Nova's in-progress live migration statuses (server migrations list only those).
LIVE_IN_PROGRESS = ("queued", "preparing", "running", "post-migrating")


async def create(session, migration: dict, instance: dict, ctx) -> None:
    """Record a new resize or cold migration (status ``pre-migrating``) in the caller's transaction.

    As Nova's conductor does: the flavors' ids, the source host and node, and the requester's
    user and project."""
    await session.execute(insert(MIGRATIONS).values(
        uuid=migration["uuid"], instance_uuid=instance["uuid"], migration_type=migration["type"],
        status=migration["status"], source_compute=migration.get("source_compute"),
        source_node=migration.get("source_node"),
        old_instance_type_id=(migration.get("old_flavor") or {}).get("id"),
        new_instance_type_id=(migration.get("new_flavor") or {}).get("id"),
        hidden=False, user_id=ctx.user_id, project_id=ctx.project_id, deleted=0, created_at=utcnow()))


async def update_record(db: Database | None, uuid: str, *, session=None, **values) -> None:
    """Set ``values`` (a status, the destination) on migration ``uuid`` unless it was deleted."""
    q = (update(MIGRATIONS).where(MIGRATIONS.c.uuid == uuid, MIGRATIONS.c.deleted == 0)
         .values(**values, updated_at=utcnow()))
    if session is not None:
        await session.execute(q)
        return
    async with db.transaction() as s:
        await s.execute(q)


async def set_status(db: Database | None, uuid: str, status: str, *, session=None) -> None:
    await update_record(db, uuid, session=session, status=status)


async def set_destination(db: Database, uuid: str, host: str, node: str) -> None:
    """The chosen destination: its host, node and host IP (Nova's ``dest_host``)."""
    async with db.transaction() as s:
        host_ip = (await s.execute(select(ComputeNode.host_ip).where(
            ComputeNode.host == host, ComputeNode.hypervisor_hostname == node,
            ComputeNode.deleted == 0))).scalar_one_or_none()
        await update_record(None, uuid, session=s, dest_compute=host, dest_node=node, dest_host=host_ip)


async def delete_for_instance(session, instance_uuid: str, now: dt.datetime) -> None:
    """Soft-delete a deleted server's migrations, as Nova's instance_destroy does."""
    await session.execute(update(MIGRATIONS).where(MIGRATIONS.c.instance_uuid == instance_uuid,
                                                   MIGRATIONS.c.deleted == 0)
                          .values(deleted=MIGRATIONS.c.id, deleted_at=now))


def _plain(row) -> dict:
    return dict(row)


async def list_migrations(db: Database, filters: dict, *, paged: bool = False, limit: int | None = None,
                          marker: str | None = None) -> list[dict]:
    """Nova's ``migration_get_all_by_filters``: ``filters`` by Nova's names (status, host or else
    source_compute, node, migration_type, hidden, instance_uuid, user_id, project_id, uuid,
    changes-since, changes-before); ``paged`` (2.59) sorts newest first (created_at, id) and pages
    after the ``marker`` migration's uuid (MarkerNotFound when there is none)."""
    t = MIGRATIONS
    q = select(t).where(t.c.deleted == 0)
    if "uuid" in filters:
        q = q.where(t.c.uuid == filters["uuid"])
    if filters.get("changes-since") is not None:
        q = q.where(t.c.updated_at >= filters["changes-since"])
    if filters.get("changes-before") is not None:
        q = q.where(t.c.updated_at <= filters["changes-before"])
    if "status" in filters:
        q = q.where(t.c.status == filters["status"])
    if "host" in filters:
        q = q.where(or_(t.c.source_compute == filters["host"], t.c.dest_compute == filters["host"]))
    elif "source_compute" in filters:
        q = q.where(t.c.source_compute == filters["source_compute"])
    if "node" in filters:
        q = q.where(or_(t.c.source_node == filters["node"], t.c.dest_node == filters["node"]))
    for key in ("migration_type", "instance_uuid", "user_id", "project_id"):
        if key in filters:
            q = q.where(t.c[key] == filters[key])
    if "hidden" in filters:
        q = q.where(t.c.hidden == filters["hidden"])
    if not paged:
        q = q.order_by(t.c.id)
    else:
        if limit == 0:
            return []
        async with db.reader() as s:
            if marker is not None:
                mark = (await s.execute(select(t.c.created_at, t.c.id).where(
                    t.c.uuid == marker, t.c.deleted == 0))).one_or_none()
                if mark is None:
                    raise exceptions.MarkerNotFound(marker=marker)
                q = q.where(or_(t.c.created_at < mark.created_at,
                                and_(t.c.created_at == mark.created_at, t.c.id < mark.id)))
        q = q.order_by(t.c.created_at.desc(), t.c.id.desc())
        if limit is not None:
            q = q.limit(limit)
    async with db.reader() as s:
        return [_plain(r) for r in (await s.execute(q)).mappings().all()]


async def in_progress_live(db: Database, instance_uuid: str) -> list[dict]:
    """The server's live migrations in progress (Nova's ``get_in_progress_by_instance``)."""
    t = MIGRATIONS
    q = select(t).where(t.c.deleted == 0, t.c.instance_uuid == instance_uuid,
                        t.c.migration_type == "live-migration", t.c.status.in_(LIVE_IN_PROGRESS))
    async with db.reader() as s:
        return [_plain(r) for r in (await s.execute(q.order_by(t.c.id))).mappings().all()]


async def by_host_and_type(db: Database, migration_type: str, statuses: tuple[str, ...], *,
                           source_compute: str | None = None, dest_compute: str | None = None) -> list[dict]:
    """Migrations of ``migration_type`` in one of ``statuses`` from ``source_compute`` (or to
    ``dest_compute``), oldest first (Nova's ``MigrationList.get_by_filters`` as
    ``_destroy_evacuated_instances`` asks it)."""
    t = MIGRATIONS
    q = select(t).where(t.c.deleted == 0, t.c.migration_type == migration_type, t.c.status.in_(statuses))
    if source_compute is not None:
        q = q.where(t.c.source_compute == source_compute)
    if dest_compute is not None:
        q = q.where(t.c.dest_compute == dest_compute)
    async with db.reader() as s:
        return [_plain(r) for r in (await s.execute(q.order_by(t.c.id))).mappings().all()]


async def destinations_in_progress(db: Database, instance_uuids, migration_type: str,
                                   statuses: tuple[str, ...]) -> dict[str, str]:
    """The destination host of each instance's migration of ``migration_type`` in ``statuses``, once
    it has one."""
    t = MIGRATIONS
    q = select(t.c.instance_uuid, t.c.dest_compute).where(
        t.c.instance_uuid.in_(list(instance_uuids)), t.c.deleted == 0, t.c.migration_type == migration_type,
        t.c.status.in_(statuses), t.c.dest_compute.is_not(None))
    async with db.reader() as s:
        return {uuid: dest for uuid, dest in (await s.execute(q)).all()}


async def get_by_id_and_instance(db: Database, migration_id: int, instance_uuid: str) -> dict | None:
    t = MIGRATIONS
    q = select(t).where(t.c.deleted == 0, t.c.id == migration_id, t.c.instance_uuid == instance_uuid)
    async with db.reader() as s:
        row = (await s.execute(q)).mappings().one_or_none()
    return _plain(row) if row is not None else None
