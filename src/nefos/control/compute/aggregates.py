"""Host aggregates (Nova's ``AggregateAPI`` and ``Aggregate`` object): named groups of compute
hosts with metadata.

The ``availability_zone`` metadata key puts the aggregate's hosts in that zone (hosts in no
zoned aggregate are in ``default_availability_zone``). As in Nova, a change that would move a
host's existing instances to another zone is refused, a host cannot be in two zones, and an
aggregate is deleted only once empty. Rows are deleted outright (Nova's API database does the
same), so views always show ``deleted: false``.

Every change checks and writes in one transaction, so a refused change writes nothing.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import defaultdict

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.db.models import Aggregate, AggregateHost, AggregateMetadata, Instance, Service, utcnow
from nefos.model.binaries import COMPUTE_BINARY

AZ_KEY = "availability_zone"
HOSTS = AggregateHost.__table__
METADATA = AggregateMetadata.__table__


def _view(row: Aggregate, hosts: list[str], metadata: dict[str, str]) -> dict:
    return {"id": row.id, "uuid": row.uuid, "name": row.name, "created_at": row.created_at,
            "updated_at": row.updated_at, "hosts": hosts, "metadata": metadata,
            "availability_zone": metadata.get(AZ_KEY)}


async def _load(s, aggregate_ids: list[int] | None = None) -> list[dict]:
    """The aggregates (all, or these ids) with their hosts and metadata, in id order."""
    q = select(Aggregate).order_by(Aggregate.id)
    hq = select(HOSTS.c.aggregate_id, HOSTS.c.host).order_by(HOSTS.c.id)
    mq = select(METADATA.c.aggregate_id, METADATA.c.key, METADATA.c.value)
    if aggregate_ids is not None:
        q = q.where(Aggregate.id.in_(aggregate_ids))
        hq = hq.where(HOSTS.c.aggregate_id.in_(aggregate_ids))
        mq = mq.where(METADATA.c.aggregate_id.in_(aggregate_ids))
    rows = (await s.execute(q)).scalars().all()
    hosts: dict[int, list[str]] = defaultdict(list)
    for agg_id, host in (await s.execute(hq)).all():
        hosts[agg_id].append(host)
    metadata: dict[int, dict[str, str]] = defaultdict(dict)
    for agg_id, key, value in (await s.execute(mq)).all():
        metadata[agg_id][key] = value
    return [_view(r, hosts[r.id], metadata[r.id]) for r in rows]


async def _get(s, aggregate_id: int) -> dict:
    found = await _load(s, [aggregate_id])
    if not found:
        raise exceptions.AggregateNotFound(aggregate_id=aggregate_id)
    return found[0]


async def list_aggregates(db) -> list[dict]:
    async with db.reader(snapshot=True) as s:
        return await _load(s)


async def get_aggregate(db, aggregate_id: int) -> dict:
    async with db.reader(snapshot=True) as s:
        return await _get(s, aggregate_id)


async def create_aggregate(db, name: str, availability_zone: str | None) -> dict:
    try:
        async with db.transaction() as s:
            if (await s.execute(select(Aggregate.id).where(Aggregate.name == name))).first():
                raise exceptions.AggregateNameExists(aggregate_name=name)
            row = Aggregate(uuid=str(uuidlib.uuid4()), name=name)
            s.add(row)
            await s.flush()
            if availability_zone:
                await s.execute(METADATA.insert().values(aggregate_id=row.id, key=AZ_KEY,
                                                         value=availability_zone))
            return await _get(s, row.id)
    except IntegrityError:  # a concurrent create took the name
        raise exceptions.AggregateNameExists(aggregate_name=name) from None


async def delete_aggregate(db, aggregate_id: int) -> None:
    async with db.transaction() as s:
        agg = await _get(s, aggregate_id)
        if agg["hosts"]:
            raise exceptions.InvalidAggregateActionDelete(aggregate_id=aggregate_id,
                                                          reason="Host aggregate is not empty")
        await s.execute(delete(METADATA).where(METADATA.c.aggregate_id == aggregate_id))
        await s.execute(delete(Aggregate).where(Aggregate.id == aggregate_id))


# Availability zone safety (Nova's is_safe_to_update_az and the "instances would move" checks) ---

async def _zones_of_hosts(s, hosts: list[str], *, excluding: int | None = None) -> dict[str, set[str]]:
    """Each host's zones from its aggregates (other than ``excluding``)."""
    q = (select(HOSTS.c.host, METADATA.c.value)
         .join(METADATA, METADATA.c.aggregate_id == HOSTS.c.aggregate_id)
         .where(HOSTS.c.host.in_(hosts), METADATA.c.key == AZ_KEY))
    if excluding is not None:
        q = q.where(HOSTS.c.aggregate_id != excluding)
    zones: dict[str, set[str]] = defaultdict(set)
    for host, value in (await s.execute(q)).all():
        zones[host].add(value)
    return zones


async def _instance_count(s, hosts: list[str]) -> int:
    if not hosts:
        return 0
    return (await s.execute(select(func.count()).select_from(Instance).where(
        Instance.host.in_(hosts), Instance.deleted == 0))).scalar_one()


async def _check_zone_change(s, agg: dict, new_zone, hosts: list[str], error, *,
                             check_instances: bool) -> None:
    """Nova's ``is_safe_to_update_az``: the zone is not empty, no host is already in another zone,
    and (``check_instances``) no host with instances changes zone."""
    if not new_zone:
        raise error(aggregate_id=agg["id"],
                    reason=f"Aggregate {agg['name']} does not support empty named availability zone")
    conflicting = sorted({z for zones in (await _zones_of_hosts(s, hosts, excluding=agg["id"])).values()
                          for z in zones if z != new_zone})
    if conflicting:
        raise error(aggregate_id=agg["id"],
                    reason=f"One or more hosts already in availability zone(s) {conflicting}")
    if check_instances and agg["availability_zone"] != new_zone and await _instance_count(s, hosts):
        raise error(aggregate_id=agg["id"], reason="One or more hosts contain instances in this zone")


def _would_move_message(old, new, count: int, verb: str) -> str:
    return (f"The host cannot be {verb} the aggregate as the availability zone of the host would "
            f"change from '{old}' to '{new}' but the host already has {count} instance(s). Changing "
            "the AZ of an existing instance is not supported by this action. Move the instances away "
            "from this host then try again. If you need to move the instances between AZs then you "
            "can use shelve_offload and unshelve to achieve this.")


# Changes ------------------------------------------------------------------------------------

async def _mark_changed(s, aggregate_id: int) -> None:
    """Its metadata or its hosts changed: schedulers re-read the aggregates when their latest
    ``updated_at`` moves (scheduler/host_cache.py)."""
    await s.execute(update(Aggregate).where(Aggregate.id == aggregate_id).values(updated_at=utcnow()))


async def _set_metadata(s, aggregate_id: int, metadata: dict) -> None:
    """Set each key; a None value deletes it (a missing key is no error, as in Nova)."""
    for key, value in metadata.items():
        await s.execute(delete(METADATA).where(METADATA.c.aggregate_id == aggregate_id, METADATA.c.key == key))
        if value is not None:
            await s.execute(METADATA.insert().values(aggregate_id=aggregate_id, key=key, value=value))
    await _mark_changed(s, aggregate_id)


async def update_aggregate(db, aggregate_id: int, values: dict) -> dict:
    """Rename and/or re-zone (``availability_zone``: 400 when null or when hosts would move zone)."""
    name = values.get("name")
    try:
        async with db.transaction() as s:
            agg = await _get(s, aggregate_id)
            if name is not None and name != agg["name"]:
                if (await s.execute(select(Aggregate.id).where(Aggregate.name == name))).first():
                    raise exceptions.AggregateNameExists(aggregate_name=name)
            await s.execute(update(Aggregate).where(Aggregate.id == aggregate_id)
                            .values(name=agg["name"] if name is None else name, updated_at=utcnow()))
            if AZ_KEY in values:
                await _check_zone_change(s, agg, values[AZ_KEY], agg["hosts"],
                                         exceptions.InvalidAggregateActionUpdate, check_instances=True)
                await _set_metadata(s, aggregate_id, {AZ_KEY: values[AZ_KEY]})
            return await _get(s, aggregate_id)
    except IntegrityError:
        raise exceptions.AggregateNameExists(aggregate_name=name) from None


async def update_metadata(db, aggregate_id: int, metadata: dict) -> dict:
    async with db.transaction() as s:
        agg = await _get(s, aggregate_id)
        if AZ_KEY in metadata:
            await _check_zone_change(s, agg, metadata[AZ_KEY], agg["hosts"],
                                     exceptions.InvalidAggregateActionUpdateMeta, check_instances=True)
        await _set_metadata(s, aggregate_id, metadata)
        return await _get(s, aggregate_id)


async def _check_compute_host(s, host: str) -> None:
    found = (await s.execute(select(Service.host).where(
        Service.host == host, Service.binary == COMPUTE_BINARY, Service.deleted == 0))).first()
    # An exact match only: a case-insensitive collation must not let "HOST-1" name "host-1".
    if found is None or found[0] != host:
        raise exceptions.ComputeHostNotFound(host=host)


async def add_host(db, aggregate_id: int, host: str) -> dict:
    try:
        async with db.transaction() as s:
            await _check_compute_host(s, host)
            agg = await _get(s, aggregate_id)
            new_zone = agg["availability_zone"]
            if new_zone is not None:
                await _check_zone_change(s, agg, new_zone, [host], exceptions.InvalidAggregateActionAdd,
                                         check_instances=False)
                old = next(iter((await _zones_of_hosts(s, [host])).get(host, ())), None)
                count = await _instance_count(s, [host])
                if count and old != new_zone:
                    raise exceptions.InvalidAggregateActionAdd(
                        aggregate_id=aggregate_id, reason=_would_move_message(old, new_zone, count, "added to"))
            if host in agg["hosts"]:
                raise exceptions.AggregateHostExists(aggregate_id=aggregate_id, host=host)
            await s.execute(HOSTS.insert().values(aggregate_id=aggregate_id, host=host))
            await _mark_changed(s, aggregate_id)
            return await _get(s, aggregate_id)
    except IntegrityError:  # a concurrent add of the same host
        raise exceptions.AggregateHostExists(aggregate_id=aggregate_id, host=host) from None


async def remove_host(db, aggregate_id: int, host: str) -> dict:
    async with db.transaction() as s:
        await _check_compute_host(s, host)
        agg = await _get(s, aggregate_id)
        if host not in agg["hosts"]:
            raise exceptions.AggregateHostNotFound(aggregate_id=aggregate_id, host=host)
        current = agg["availability_zone"]
        if current is not None:
            count = await _instance_count(s, [host])
            new = next(iter((await _zones_of_hosts(s, [host], excluding=aggregate_id)).get(host, ())), None)
            if count and new != current:
                raise exceptions.InvalidAggregateActionDelete(
                    aggregate_id=aggregate_id, reason=_would_move_message(current, new, count, "removed from"))
        await s.execute(delete(HOSTS).where(HOSTS.c.aggregate_id == aggregate_id, HOSTS.c.host == host))
        await _mark_changed(s, aggregate_id)
        return await _get(s, aggregate_id)


# What other services read ------------------------------------------------------------------------

async def host_zones(s) -> dict[str, str]:
    """Each host that is in a zoned aggregate, with its zone (one query, in session ``s``)."""
    rows = (await s.execute(
        select(HOSTS.c.host, METADATA.c.value)
        .join(METADATA, METADATA.c.aggregate_id == HOSTS.c.aggregate_id)
        .where(METADATA.c.key == AZ_KEY).order_by(HOSTS.c.aggregate_id))).all()
    zones: dict[str, str] = {}
    for host, value in rows:
        zones.setdefault(host, value)  # one zone per host is enforced; the oldest aggregate wins a race
    return zones


async def host_aggregate_metadata(s) -> dict[str, list[dict[str, str]]]:
    """Each host in an aggregate with the metadata of each of its aggregates (one query)."""
    rows = (await s.execute(
        select(HOSTS.c.host, HOSTS.c.aggregate_id, METADATA.c.key, METADATA.c.value)
        .join(METADATA, METADATA.c.aggregate_id == HOSTS.c.aggregate_id, isouter=True)
        .order_by(HOSTS.c.aggregate_id))).all()
    by_host: dict[str, dict[int, dict[str, str]]] = defaultdict(dict)
    for host, agg_id, key, value in rows:
        md = by_host[host].setdefault(agg_id, {})
        if key is not None:
            md[key] = value
    return {host: list(aggs.values()) for host, aggs in by_host.items()}
