"""Services (rows in ``services``): liveness, enable/disable, forced down, delete.

``is_up`` is the one definition of "this service is alive" that the API, the
scheduler and the compute API share: not forced down, and a heartbeat
(``last_seen_up``, else the row's ``updated_at``/``created_at``) no older than
``service_down_time``.
"""

from __future__ import annotations


from sqlalchemy import select, update

from nefos import exceptions
from nefos.control.compute.aggregates import host_zones
from nefos.db.models import ComputeNode, Instance, Service
from nefos.objects import event_log
from nefos.model.binaries import COMPUTE_BINARY  # noqa: F401  (re-exported)
from nefos.objects.service_rows import as_naive_utc, field as _field, is_up, last_heartbeat  # noqa: F401  (re-exported)

INTERNAL_ZONE = "internal"


def is_compute(service) -> bool:
    return _field(service, "binary") == COMPUTE_BINARY or _field(service, "topic") == "compute"


def zone_of(service, cfg, aggregate_zones: dict[str, str] | None = None) -> str:
    """The availability zone Nova reports: a compute host's is its aggregate's zone
    (``aggregate_zones``, host to zone), else the service's own, else the default; ``internal``
    for the other services."""
    if is_compute(service):
        return ((aggregate_zones or {}).get(_field(service, "host")) or _field(service, "availability_zone")
                or cfg.default_availability_zone)
    return INTERNAL_ZONE


def to_dict(row: Service, cfg, aggregate_zones: dict[str, str] | None = None) -> dict:
    d = row.to_dict()
    d["zone"] = zone_of(row, cfg, aggregate_zones)
    d["state"] = "up" if is_up(row, cfg) else "down"
    d["status"] = "disabled" if row.disabled else "enabled"
    d["updated_at"] = max((t for t in (as_naive_utc(row.updated_at), as_naive_utc(row.last_seen_up)) if t),
                          default=None)
    return d


async def list_services(db, cfg, *, host: str | None = None, binary: str | None = None) -> list[dict]:
    q = select(Service).where(Service.deleted == 0).order_by(Service.id)
    if host is not None:
        q = q.where(Service.host == host)
    if binary is not None:
        q = q.where(Service.binary == binary)
    async with db.reader() as s:
        rows = (await s.execute(q)).scalars().all()
        zones = await host_zones(s)
    return [to_dict(r, cfg, zones) for r in rows]


async def get_service(db, cfg, service_id: int | str) -> dict:
    """By integer id or uuid."""
    column = Service.uuid if isinstance(service_id, str) and not service_id.isdigit() else Service.id
    value = service_id if column is Service.uuid else int(service_id)
    async with db.reader() as s:
        row = (await s.execute(select(Service).where(column == value, Service.deleted == 0))).scalar_one_or_none()
        zones = await host_zones(s)
    if row is None:
        raise exceptions.ServiceNotFound(service_id=service_id)
    return to_dict(row, cfg, zones)


async def update_by_host_and_binary(db, host: str, binary: str, values: dict) -> None:
    """Set ``values`` (disabled, disabled_reason, disabled_by, forced_down) on one service."""
    async with db.transaction() as s:
        result = await s.execute(
            update(Service).where(Service.host == host, Service.binary == binary, Service.deleted == 0)
            .values(**values).execution_options(synchronize_session=False))
        if result.rowcount != 1:
            raise exceptions.HostBinaryNotFound(binary=binary, host=host)
        if binary == COMPUTE_BINARY and "disabled" in values:
            await event_log.append(s, event_log.host_disabled(
                host, values["disabled"], values.get("disabled_reason"), values.get("disabled_by")))


async def set_disabled(db, host: str, binary: str, disabled: bool, reason: str | None = None,
                       by: str = "operator") -> None:
    """Disable (recording who did, and why) or enable (clearing both) a service."""
    values = ({"disabled": True, "disabled_reason": reason, "disabled_by": by} if disabled
              else {"disabled": False, "disabled_reason": None, "disabled_by": None})
    await update_by_host_and_binary(db, host, binary, values)


async def set_forced_down(db, host: str, binary: str, forced_down: bool) -> None:
    await update_by_host_and_binary(db, host, binary, {"forced_down": forced_down})


async def update_by_uuid(db, cfg, service_uuid: str, values: dict) -> dict:
    """Set ``values`` (disabled, disabled_reason, forced_down) on the service ``service_uuid``; its new
    state. Only compute services can be updated (400), as in Nova from 2.53."""
    async with db.transaction() as s:
        row = (await s.execute(select(Service).where(Service.uuid == service_uuid, Service.deleted == 0))
               ).scalar_one_or_none()
        if row is None:
            raise exceptions.ServiceNotFound(service_id=service_uuid)
        if row.binary != COMPUTE_BINARY:
            raise exceptions.ValidationError(
                f"Updating a {row.binary} service is not supported. Only {COMPUTE_BINARY} "
                "services can be updated.")
        if values.get("disabled") is True:
            values = {**values, "disabled_by": "operator"}
        elif values.get("disabled") is False:
            values = {**values, "disabled_by": None}
        changes_disabled = "disabled" in values and bool(values["disabled"]) != bool(row.disabled)
        for key, value in values.items():
            setattr(row, key, value)
        await s.flush()
        if changes_disabled:
            await event_log.append(s, event_log.host_disabled(row.host, row.disabled, row.disabled_reason,
                                                              row.disabled_by))
        return to_dict(row, cfg, await host_zones(s))


async def delete_service(db, service_id: int | str) -> None:
    """Soft-delete a service (and a compute service's nodes); 409 while it hosts instances."""
    column = Service.uuid if isinstance(service_id, str) and not service_id.isdigit() else Service.id
    value = service_id if column is Service.uuid else int(service_id)
    async with db.transaction() as s:
        row = (await s.execute(select(Service).where(column == value, Service.deleted == 0))).scalar_one_or_none()
        if row is None:
            raise exceptions.ServiceNotFound(service_id=service_id)
        if is_compute(row):
            hosting = (await s.execute(select(Instance.id).where(
                Instance.host == row.host, Instance.deleted == 0).limit(1))).first()
            if hosting:
                raise exceptions.ServiceInUse(
                    reason="Unable to delete compute service that is hosting instances. "
                           "Migrate or delete the instances first.")
            await s.execute(update(ComputeNode).where(ComputeNode.host == row.host, ComputeNode.deleted == 0)
                            .values(deleted=ComputeNode.id).execution_options(synchronize_session=False))
        row.deleted = row.id
