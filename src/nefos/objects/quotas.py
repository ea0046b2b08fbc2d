"""Per-project quotas, enforced under concurrency.

Usage lives in ``quota_usages``; ``consume`` raises it with one conditional
``UPDATE ... SET in_use = in_use + n WHERE in_use + n <= limit`` per
resource inside the caller's transaction (the limit resolved by the UPDATE
itself), so racing requests can never overshoot and a rolled-back transaction
takes its usage with it. ``release``
gives usage back. Limits: a row in ``quotas``, else the ``default`` quota class's
row in ``quota_classes``, else the configured default (``quota_<resource>``), -1
meaning unlimited.
"""

from __future__ import annotations

from sqlalchemy import bindparam, case, func, literal, or_, select, union_all, update
from sqlalchemy.dialects.mysql import insert as mysql_insert

from nefos import exceptions
from nefos.config import Config
from nefos.db.models import Quota, QuotaClass, QuotaUsage
from nefos.db.session import insert_ignoring_duplicate

RESOURCES = (
    "instances", "cores", "ram", "key_pairs", "server_groups", "server_group_members",
    "metadata_items", "networks", "subnets", "ports", "security_groups", "security_group_rules",
    "routers", "floatingips",
)
_CONFIG_NAMES = {r: f"quota_{r}" for r in RESOURCES}


DEFAULT_CLASS = "default"

# Built once: quotas are checked and usage changed in every create.
_Q = Quota.__table__
_QC = QuotaClass.__table__
_QU = QuotaUsage.__table__
_CLASS_LIMITS = select(_QC.c.resource, _QC.c.hard_limit).where(_QC.c.class_name == DEFAULT_CLASS)
_OWN_LIMITS = select(_Q.c.resource, _Q.c.hard_limit).where(_Q.c.project_id == bindparam("b_project"))
_USAGES = select(_QU.c.resource, _QU.c.in_use).where(_QU.c.project_id == bindparam("b_project"))
# (precedence, resource, number): the class's limits, then the project's own, then (2) its usage.
_LIMITS = union_all(
    select(literal(0).label("own"), _QC.c.resource, _QC.c.hard_limit).where(_QC.c.class_name == DEFAULT_CLASS),
    select(literal(1).label("own"), _Q.c.resource, _Q.c.hard_limit).where(_Q.c.project_id == bindparam("b_project")))
_LIMITS_AND_USAGES = union_all(
    select(literal(0).label("own"), _QC.c.resource, _QC.c.hard_limit).where(_QC.c.class_name == DEFAULT_CLASS),
    select(literal(1).label("own"), _Q.c.resource, _Q.c.hard_limit).where(_Q.c.project_id == bindparam("b_project")),
    select(literal(2).label("own"), _QU.c.resource, _QU.c.in_use).where(_QU.c.project_id == bindparam("b_project")))
_EXISTING_USAGES = select(_QU.c.resource).where(_QU.c.project_id == bindparam("b_project"),
                                                _QU.c.resource.in_(bindparam("b_resources", expanding=True)))
# The resource's limit, as ``limits`` resolves it, inside the UPDATE (so ``consume`` reads no
# limits unless it fails): the project's row, else the default class's, else the configured one.
_LIMIT = func.coalesce(
    select(_Q.c.hard_limit).where(_Q.c.project_id == bindparam("b_project"),
                                  _Q.c.resource == bindparam("b_resource")).scalar_subquery(),
    select(_QC.c.hard_limit).where(_QC.c.class_name == DEFAULT_CLASS,
                                   _QC.c.resource == bindparam("b_resource")).scalar_subquery(),
    bindparam("b_default", type_=_QU.c.in_use.type))
_USAGE_ROW = (_QU.c.project_id == bindparam("b_project"), _QU.c.resource == bindparam("b_resource"))
_ADD = update(_QU).where(*_USAGE_ROW).values(in_use=_QU.c.in_use + bindparam("b_delta", type_=_QU.c.in_use.type))
_ADD_WITHIN_LIMIT = _ADD.where(or_(_LIMIT < 0, _QU.c.in_use + bindparam("b_delta", type_=_QU.c.in_use.type) <= _LIMIT))
# Never below zero: in_use - n, or 0 where that is negative.
_RELEASE = update(_QU).where(*_USAGE_ROW).values(in_use=case(
    (_QU.c.in_use - bindparam("b_delta", type_=_QU.c.in_use.type) < 0, 0),
    else_=_QU.c.in_use - bindparam("b_delta", type_=_QU.c.in_use.type)))


def configured_defaults(cfg: Config) -> dict[str, int]:
    return {r: getattr(cfg, name) for r, name in _CONFIG_NAMES.items()}


async def class_defaults(session, cfg: Config) -> dict[str, int]:
    """Every project's default limits: the configured ``quota_<resource>``, overridden by the
    ``default`` quota class (os-quota-class-sets); may hold more resources than RESOURCES."""
    result = configured_defaults(cfg)
    result.update(dict((await session.execute(_CLASS_LIMITS)).all()))
    return result


def _resolve(cfg: Config, rows) -> tuple[dict[str, int], dict[str, int]]:
    """(limits, usages) from ``_LIMITS`` / ``_LIMITS_AND_USAGES`` rows."""
    limit = configured_defaults(cfg)
    own = {}
    used = {r: 0 for r in RESOURCES}
    for precedence, resource, number in rows:
        if precedence == 0:
            limit[resource] = number
        elif precedence == 1:
            own[resource] = number
        else:
            used[resource] = number
    limit.update(own)
    return limit, used


async def limits(session, cfg: Config, project_id: str) -> dict[str, int]:
    """The project's limits: its own rows over the ``default`` class's over the configuration
    (one statement: this runs in every create)."""
    return _resolve(cfg, (await session.execute(_LIMITS, {"b_project": project_id})).all())[0]


async def usages(session, project_id: str) -> dict[str, int]:
    used = {r: 0 for r in RESOURCES}
    used.update((await session.execute(_USAGES, {"b_project": project_id})).all())
    return used


async def limits_and_usages(session, cfg: Config, project_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """``limits`` and ``usages`` in one statement."""
    return _resolve(cfg, (await session.execute(_LIMITS_AND_USAGES, {"b_project": project_id})).all())


async def _ensure_usage_row(session, project_id: str, resource: str) -> None:
    """The project's usage row of ``resource``, created at 0 when missing (a concurrent request
    may create it first: that row serves as well), in the caller's transaction."""
    if (await session.execute(_EXISTING_USAGES, {"b_project": project_id, "b_resources": [resource]})).first():
        return
    row = {"project_id": project_id, "resource": resource, "in_use": 0}
    if session.bind.dialect.name == "mysql":
        # InnoDB: a duplicate-key error leaves a shared lock on the row until the end of the
        # transaction, so two requests racing to create it would both hold it shared and
        # deadlock on the UPDATE that follows. An upsert that changes nothing takes the row
        # exclusively instead (and needs no second connection, which a busy pool may not have).
        statement = mysql_insert(_QU).values(row)
        await session.execute(statement.on_duplicate_key_update(in_use=_QU.c.in_use))
        return
    await insert_ignoring_duplicate(session, QuotaUsage.__table__, row)


async def consume(session, cfg: Config, project_id: str | None, deltas: dict[str, int]) -> None:
    """Add ``deltas`` to the project's usage, or raise OverQuota naming every resource over."""
    if not project_id:
        return
    deltas = {r: d for r, d in deltas.items() if d}
    if not deltas:
        return

    async def add(resource: str, delta: int) -> bool:
        if delta > 0:  # within the limit (-1: unlimited), resolved by the UPDATE itself
            name = _CONFIG_NAMES.get(resource)
            result = await session.execute(_ADD_WITHIN_LIMIT, {
                "b_project": project_id, "b_resource": resource, "b_delta": delta,
                "b_default": getattr(cfg, name) if name else None})
        else:
            result = await session.execute(_ADD, {"b_project": project_id, "b_resource": resource,
                                                  "b_delta": delta})
        return result.rowcount == 1

    # One resource at a time, in one order for every request, each row created (on the project's
    # first use of it) before the next is touched: every request locks the rows in the same
    # order, so concurrent requests queue instead of deadlocking.
    overs = []
    for resource, delta in sorted(deltas.items()):
        if await add(resource, delta):
            continue
        await _ensure_usage_row(session, project_id, resource)  # over the limit, or no row yet
        if not await add(resource, delta):
            overs.append(resource)
    if overs:
        limit, used = await limits_and_usages(session, cfg, project_id)
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
        await session.execute(_RELEASE, {"b_project": project_id, "b_resource": resource, "b_delta": delta})
