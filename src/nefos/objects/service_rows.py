"""The rows of ``services``: registration and heartbeats (Nova's servicegroup database driver;
a compute host's go through the conductor), and the compute service's own state.

A compute host disables and re-enables its own service as its hypervisor connection
drops and returns (Nova's ``_set_host_enabled``), and records the connection itself
(``record_hypervisor_connection``): hypervisor health, apart from heartbeat liveness and
from whether the service is enabled (an operator's disable hides neither).

Automation marks what it does: ``disabled_by = "auto"`` and a reason starting
with ``AUTO: ``. It re-enables only a service it disabled itself; an
operator's disable (``disabled_by = "operator"``, set by os-services) is never
overridden. Each change is ONE conditional UPDATE, so an operator acting at
the same moment wins whichever statement commits first.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid as uuidlib

from sqlalchemy import or_, select, update

from nefos.objects import event_log
from nefos.model.binaries import COMPUTE_BINARY
from nefos.db.models import Service, utcnow

LOG = logging.getLogger(__name__)

DISABLE_PREFIX = "AUTO: "
DISABLED_BY_AUTO = "auto"
DISABLE_REASON_UNDEFINED = "None"


async def register(db, host: str, binary: str, topic: str | None, version: str | None = None) -> int:
    """Create or revive this (host, binary) row; returns its id. ``version``: the version of the
    RPC interface the service serves (``nefos.bus.interfaces``; the ``auto`` upgrade level reads it).
    A compute host registering is up: the event stream says so then (``host.up``), not at the next
    look of the liveness watcher."""
    async with db.transaction() as s:
        row = (await s.execute(select(Service).where(
            Service.host == host, Service.binary == binary, Service.deleted == 0))).scalar_one_or_none()
        if row is None:
            row = Service(uuid=str(uuidlib.uuid4()), host=host, binary=binary, topic=topic, last_seen_up=utcnow(),
                          report_count=0, version=version)
            s.add(row)
            await s.flush()
        else:
            row.last_seen_up = utcnow()
            row.version = version  # an upgraded (or downgraded) service says so
        if binary == COMPUTE_BINARY and row.reported_up is not True:  # a host starting is up at once
            row.reported_up = True
            await event_log.append(s, event_log.entry(event_log.HOST_UP, host=host))
        return row.id


async def heartbeat(db, service_id: int) -> None:
    """Record that the service is alive. The row's ``updated_at`` stays: it moves with the changes
    of the row (enabled, forced down, deleted) that schedulers re-read by it (scheduler/host_cache.py),
    not with each heartbeat (a hundred a second at a thousand hosts); the API shows the later of
    both as the service's ``updated_at``, as Nova's heartbeat time."""
    async with db.transaction() as s:
        await s.execute(update(Service).where(Service.id == service_id).values(
            last_seen_up=utcnow(), report_count=Service.report_count + 1, updated_at=Service.updated_at))


def auto_reason(reason: str | None) -> str:
    return (DISABLE_PREFIX + (reason or DISABLE_REASON_UNDEFINED))[:255]


async def set_host_enabled(db, host: str, enabled: bool, reason: str | None = None) -> bool:
    """Enable (only if automation disabled it) or disable (unless an operator did) the
    compute service of ``host``. Returns whether the row changed."""
    q = update(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY, Service.deleted == 0)
    if enabled:
        q = q.where(Service.disabled.is_(True), Service.disabled_by == DISABLED_BY_AUTO,
                    Service.disabled_reason.startswith(DISABLE_PREFIX, autoescape=True)).values(
            disabled=False, disabled_reason=None, disabled_by=None, updated_at=utcnow())
    else:
        # Enabled, or already disabled by automation (then only the reason changes).
        q = q.where(or_(Service.disabled.is_(False), Service.disabled_by == DISABLED_BY_AUTO)).values(
            disabled=True, disabled_reason=auto_reason(reason), disabled_by=DISABLED_BY_AUTO,
            updated_at=utcnow())
    async with db.transaction() as s:
        result = await s.execute(q.execution_options(synchronize_session=False))
        changed = result.rowcount == 1
        if changed:
            await event_log.append(s, event_log.host_disabled(
                host, not enabled, None if enabled else auto_reason(reason), None if enabled else DISABLED_BY_AUTO))
    if changed:
        LOG.warning("compute service on %s %s%s", host, "enabled" if enabled else "disabled",
                    "" if enabled else f" ({auto_reason(reason)})")
    else:
        LOG.debug("compute service on %s: not %s (manually disabled, already in that state, "
                  "or not registered yet)", host, "enabling" if enabled else "disabling")
    return changed


async def record_hypervisor_connection(db, host: str, connected: bool, reason: str | None = None) -> None:
    """Store the driver's latest connection report on the host's compute service row; ``since``
    changes only when the state does."""
    state = "connected" if connected else "disconnected"
    base = update(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY, Service.deleted == 0)
    async with db.transaction() as s:
        await s.execute(base.where(or_(Service.hypervisor_connection.is_(None),
                                       Service.hypervisor_connection != state))
                        .values(hypervisor_connection=state, hypervisor_connection_since=utcnow())
                        .execution_options(synchronize_session=False))
        await s.execute(base.values(hypervisor_connection_reason=None if connected else (reason or "")[:255])
                        .execution_options(synchronize_session=False))


async def publish_vif_wait_stats(db, host: str, stats: dict) -> None:
    """Store the host's recent vif-event wait figures on its compute service row."""
    async with db.transaction() as s:
        await s.execute(update(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY,
                                              Service.deleted == 0).values(vif_wait_stats=stats)
                        .execution_options(synchronize_session=False))


# Liveness (Nova's servicegroup database driver) ---------------------------------------------------

def field(obj, name):
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def as_naive_utc(value) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def last_heartbeat(service) -> dt.datetime | None:
    return as_naive_utc(field(service, "last_seen_up") or field(service, "updated_at")
                         or field(service, "created_at"))


def up_window(service, cfg) -> tuple[dt.datetime, dt.datetime] | None:
    """The times between which ``service`` (a ``services`` row or its dict) counts as alive: its last
    heartbeat, give or take ``service_down_time``; None when forced down or never seen."""
    if field(service, "forced_down"):
        return None
    last = last_heartbeat(service)
    if last is None:
        return None
    span = dt.timedelta(seconds=cfg.service_down_time)
    return last - span, last + span


def is_up(service, cfg) -> bool:
    """Whether ``service`` (a ``services`` row or its dict) is alive (Nova's servicegroup DB driver)."""
    window = up_window(service, cfg)
    return window is not None and window[0] <= utcnow() <= window[1]


async def host_up(db, cfg, host: str) -> bool:
    """The compute service of ``host`` reports (up, not forced down)."""
    async with db.reader() as s:
        svc = (await s.execute(select(Service).where(Service.host == host, Service.binary == COMPUTE_BINARY,
                                                     Service.deleted == 0))).scalar_one_or_none()
    return svc is not None and is_up(svc, cfg)


async def report_liveness_changes(db, cfg) -> int:
    """Write ``host.up`` / ``host.down`` for each compute host whose liveness changed since the event
    log last told it; how many were written. Each change is a compare-and-swap on the row's
    ``reported_up``, so several conductors doing this at once tell each change once."""
    async with db.reader() as s:
        rows = (await s.execute(select(Service).where(Service.binary == COMPUTE_BINARY,
                                                      Service.deleted == 0))).scalars().all()
    changes = [(row.id, row.host, row.reported_up, is_up(row, cfg)) for row in rows]
    told = 0
    for service_id, host, reported, up in changes:
        if reported is not None and reported == up:
            continue
        was = Service.reported_up.is_(None) if reported is None else Service.reported_up == reported
        async with db.transaction() as s:
            result = await s.execute(update(Service).where(Service.id == service_id, was)
                                     .values(reported_up=up, updated_at=Service.updated_at)
                                     .execution_options(synchronize_session=False))
            if result.rowcount == 1:
                await event_log.append(s, event_log.entry(event_log.HOST_UP if up else event_log.HOST_DOWN,
                                                          host=host))
                told += 1
    return told
