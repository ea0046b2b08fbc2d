"""Per-project quotas, enforced under concurrency.

Usage lives in ``quota_usages``; ``consume`` raises it with one conditional
``UPDATE ... SET in_use = in_use + n WHERE in_use + n <= limit`` per
resource inside the caller's transaction, so racing requests can never
overshoot and a rolled-back transaction takes its usage with it. ``release``
gives usage back. Limits: a row in ``quotas``, else the ``default`` quota class's
row in ``quota_classes``, else the configured default (``quota_<resource>``), -1
meaning unlimited.
"""

from __future__ import annotations

from sqlalchemy import insert, literal, select, union_all, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from nefos import exceptions
from nefos.config import Config
from nefos.db.models import Quota, QuotaClass, QuotaUsage

RESOURCES = (
    "instances", "cores", "ram", "key_pairs", "server_groups", "server_group_members",
    "metadata_items", "networks", "subnets", "ports", "security_groups", "security_group_rules",
)


DEFAULT_CLASS = "default"


def configured_defaults(cfg: Config) -> dict[str, int]:
    return {r: getattr(cfg, f"quota_{r}") for r in RESOURCES}


async def class_defaults(session, cfg: Config) -> dict[str, int]:
    """Every project's default limits: the configured ``quota_<resource>``, overridden by the
    ``default`` quota class (os-quota-class-sets); may hold more resources than RESOURCES."""
    result = configured_defaults(cfg)
    rows = (await session.execute(select(QuotaClass.resource, QuotaClass.hard_limit).where(
        QuotaClass.class_name == DEFAULT_CLASS))).all()
    result.update(dict(rows))
    return result


async def limits(session, cfg: Config, project_id: str) -> dict[str, int]:
    """The project's limits: its own rows over the ``default`` class's over the configuration
    (one statement: this runs in every create)."""
    result = configured_defaults(cfg)
    rows = (await session.execute(union_all(
        select(literal(0).label("own"), QuotaClass.resource, QuotaClass.hard_limit)
        .where(QuotaClass.class_name == DEFAULT_CLASS),
        select(literal(1).label("own"), Quota.resource, Quota.hard_limit)
        .where(Quota.project_id == project_id)))).all()
    for _own, resource, hard_limit in sorted(rows, key=lambda row: row[0]):
        result[resource] = hard_limit
    return result


async def usages(session, project_id: str) -> dict[str, int]:
    rows = (await session.execute(select(QuotaUsage).where(QuotaUsage.project_id == project_id))).scalars()
    used = {r: 0 for r in RESOURCES}
    used.update({row.resource: row.in_use for row in rows})
    return used


async def _ensure_usage_rows(session, project_id: str, resources) -> None:
    existing = set((await session.execute(select(QuotaUsage.resource).where(
        QuotaUsage.project_id == project_id, QuotaUsage.resource.in_(list(resources))))).scalars())
    missing = [r for r in resources if r not in existing]
    if not missing:
        return
    engine = session.bind if isinstance(session.bind, AsyncEngine) else session.bind.engine
    if engine.dialect.name == "mysql":
        # InnoDB: a duplicate-key error leaves a shared lock on the row until the end of the
        # transaction (a savepoint does not release it), so two requests racing to create
        # the row would both hold it shared and deadlock on the UPDATE below. Create the
        # missing rows in their own short transaction instead; a zero row is harmless.
        async with engine.connect() as conn:
            for resource in missing:
                try:
                    async with conn.begin():
                        await conn.execute(insert(QuotaUsage).values(
                            project_id=project_id, resource=resource, in_use=0))
                except IntegrityError:
                    pass  # a concurrent request created it
        return
    for resource in missing:
        try:
            async with session.begin_nested():
                session.add(QuotaUsage(project_id=project_id, resource=resource, in_use=0))
        except IntegrityError:
            pass  # a concurrent request created it


async def consume(session, cfg: Config, project_id: str | None, deltas: dict[str, int]) -> None:
    """Add ``deltas`` to the project's usage, or raise OverQuota naming every resource over."""
    if not project_id:
        return
    deltas = {r: d for r, d in deltas.items() if d}
    if not deltas:
        return
    limit = await limits(session, cfg, project_id)

    async def add(resource: str, delta: int) -> bool:
        q = update(QuotaUsage).where(QuotaUsage.project_id == project_id,
                                     QuotaUsage.resource == resource)
        if limit[resource] >= 0 and delta > 0:
            q = q.where(QuotaUsage.in_use + delta <= limit[resource])
        result = await session.execute(q.values(in_use=QuotaUsage.in_use + delta)
                                       .execution_options(synchronize_session=False))
        return result.rowcount == 1

    missed = [r for r, d in sorted(deltas.items()) if not await add(r, d)]
    overs = []
    if missed:  # over the limit, or the project's first use of the resource (no usage row yet)
        await _ensure_usage_rows(session, project_id, missed)
        overs = [r for r in missed if not await add(r, deltas[r])]
    if overs:
        used = await usages(session, project_id)
        raise exceptions.OverQuota(
            f"Quota exceeded for {', '.join(overs)}: Requested "
            f"{', '.join(str(deltas[o]) for o in overs)}, but already used "
            f"{', '.join(str(used[o]) for o in overs)} of "
            f"{', '.join(str(limit[o]) for o in overs)} {', '.join(overs)}",
            overs=overs)


async def release(session, project_id: str | None, deltas: dict[str, int]) -> None:
    """Give usage back (never below zero)."""
    if not project_id:
        return
    for resource, delta in deltas.items():
        if not delta:
            continue
        await session.execute(
            update(QuotaUsage)
            .where(QuotaUsage.project_id == project_id, QuotaUsage.resource == resource)
            .values(in_use=QuotaUsage.in_use - delta)
            .execution_options(synchronize_session=False))
        await session.execute(
            update(QuotaUsage)
            .where(QuotaUsage.project_id == project_id, QuotaUsage.resource == resource,
                   QuotaUsage.in_use < 0)
            .values(in_use=0).execution_options(synchronize_session=False))
