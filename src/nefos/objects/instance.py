"""Instance persistence: reads, and the compare-and-swap save every transition uses.

An instance crosses the bus as a plain dict (``to_dict``). ``save`` writes
only the given fields and, when ``expected_task_state`` is passed, only if
the row's task_state is still one of those values: a single
``UPDATE ... WHERE task_state IN (...)``, atomic on every backend. A
mismatch raises ``UnexpectedTaskStateError`` (or the deleting variant), so a
delete racing a build always wins and the build notices.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from sqlalchemy import bindparam, insert, or_, select, update

from nefos import exceptions
from nefos.db import listing
from nefos.db.models import Instance, InstanceFault, utcnow
from nefos.db.session import Database
from nefos.objects import event_log
from nefos.model import faults, states

_UNSET = object()


INSTANCES = Instance.__table__  # Core statements: the hot path needs no ORM identity map


def _plain(data: dict) -> dict:
    for key, value in data.items():
        if isinstance(value, dt.datetime):
            data[key] = value.isoformat()
    if data.get("metadata") is None:
        data["metadata"] = {}
    return data


def to_dict(row: Instance) -> dict:
    """An ORM instance row as the dict that crosses the bus."""
    data = row.to_dict()
    data["metadata"] = data.pop("metadata_")
    return _plain(data)


def mapping_to_dict(mapping) -> dict:
    """A Core row of ``instances`` (column names as keys) as the dict that crosses the bus."""
    return _plain(dict(mapping))


def _column_values(updates: dict) -> dict:
    values = {}
    for key, value in updates.items():
        if isinstance(value, str) and key.endswith(("_at", "_time")):
            value = dt.datetime.fromisoformat(value)
        values[key] = value
    return values


# Built once: composing a statement costs SQLAlchemy about three times what running it does
# (docs/benchmarks.md), and these run several times in every boot.
_GET = select(INSTANCES).where(INSTANCES.c.uuid == bindparam("b_uuid"), INSTANCES.c.deleted == 0)
_GET_ANY = select(INSTANCES).where(INSTANCES.c.uuid == bindparam("b_uuid"))


_INSERT = insert(INSTANCES)
_INSERT_RETURNING = insert(INSTANCES).returning(*INSTANCES.c)


async def create(session, values: dict) -> dict:
    """Insert an instance row (``values`` by column name) in the caller's transaction; returns it."""
    if session.bind.dialect.insert_returning:
        instance = mapping_to_dict((await session.execute(_INSERT_RETURNING, values)).mappings().one())
    else:
        await session.execute(_INSERT, values)
        instance = mapping_to_dict((await session.execute(_GET, {"b_uuid": values["uuid"]})).mappings().one())
    await event_log.append(session, event_log.entry(
        event_log.SERVER_CREATED, server_id=instance["uuid"], host=instance.get("host"),
        data={"name": instance.get("display_name"), **event_log.server_state(instance)}))
    return instance


async def get(db: Database, uuid: str, *, read_deleted: bool = False) -> dict:
    async with db.reader() as s:
        row = (await s.execute(_GET_ANY if read_deleted else _GET, {"b_uuid": uuid})).mappings().one_or_none()
    if row is None:
        raise exceptions.InstanceNotFound(instance_id=uuid)
    return mapping_to_dict(row)


_SYSTEM_METADATA_ATTEMPTS = 20


async def change_system_metadata(db: Database, uuid: str, change) -> dict:
    """Apply ``change`` (the instance dict -> its new system metadata, or None for no change) as a
    compare-and-swap on ``updated_at``: the other keys another writer changes meanwhile are kept.
    The instance as ``change`` last saw it."""
    for _ in range(_SYSTEM_METADATA_ATTEMPTS):
        instance = await get(db, uuid)
        sysmeta = change(instance)
        if sysmeta is None:
            return instance
        seen = instance.get("updated_at")
        unchanged = (INSTANCES.c.updated_at.is_(None) if seen is None
                     else INSTANCES.c.updated_at == dt.datetime.fromisoformat(seen))
        q = (update(INSTANCES).where(INSTANCES.c.uuid == uuid, INSTANCES.c.deleted == 0, unchanged)
             .values(system_metadata=sysmeta, updated_at=utcnow()))
        async with db.transaction() as s:
            if (await s.execute(q)).rowcount == 1:
                return instance
    raise exceptions.Conflict(f"Instance {uuid} kept changing while its system metadata was being saved.")


_TASK_STATE = select(INSTANCES.c.task_state).where(INSTANCES.c.uuid == bindparam("b_uuid"), INSTANCES.c.deleted == 0)


async def task_state(db: Database, uuid: str) -> str | None:
    """Only the instance's task_state (InstanceNotFound once it is deleted), for checks needing no more."""
    async with db.reader() as s:
        row = (await s.execute(_TASK_STATE, {"b_uuid": uuid})).one_or_none()
    if row is None:
        raise exceptions.InstanceNotFound(instance_id=uuid)
    return row.task_state


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


@functools.lru_cache(maxsize=512)
def _save_statement(columns: tuple[str, ...], task_values: int, task_none: bool, vm_states: int,
                    returning: bool):
    """The compare-and-swap UPDATE for one shape of save (which columns, how many expected states),
    built once; the values and expected states are its parameters (one per expected state, not an
    expanding IN, which SQLAlchemy would rewrite on every call)."""
    q = update(INSTANCES).where(INSTANCES.c.uuid == bindparam("b_uuid"), INSTANCES.c.deleted == 0)
    expected = []
    if task_values:
        expected.append(INSTANCES.c.task_state.in_([bindparam(f"b_task_state_{i}") for i in range(task_values)]))
    if task_none:
        expected.append(INSTANCES.c.task_state.is_(None))
    if expected:
        q = q.where(or_(*expected))
    if vm_states:
        q = q.where(INSTANCES.c.vm_state.in_([bindparam(f"b_vm_state_{i}") for i in range(vm_states)]))
    q = q.values({c: bindparam(f"v_{c}") for c in columns})
    return q.returning(*INSTANCES.c) if returning else q


async def save(db: Database, uuid: str, updates: dict, *,
               expected_task_state: Any = _UNSET, expected_vm_state: Any = _UNSET,
               session=None) -> dict:
    """Write ``updates``; with ``expected_*`` only if the row still matches. Returns the new row."""
    values = _column_values(updates)
    values["updated_at"] = utcnow()
    params = {f"v_{c}": v for c, v in values.items()}
    params["b_uuid"] = uuid
    task_values, task_none, vm_states = 0, False, 0
    if expected_task_state is not _UNSET:
        expected = _as_list(expected_task_state)
        states_given = [e for e in expected if e is not None]
        task_values, task_none = len(states_given), None in expected
        params.update({f"b_task_state_{i}": state for i, state in enumerate(states_given)})
    if expected_vm_state is not _UNSET:
        vm_given = _as_list(expected_vm_state)
        vm_states = len(vm_given)
        params.update({f"b_vm_state_{i}": state for i, state in enumerate(vm_given)})
    returning = db.engine.dialect.update_returning
    q = _save_statement(tuple(sorted(values)), task_values, task_none, vm_states, returning)

    async def _apply(s):
        saved = await _write(s)
        if saved is not None:
            await event_log.server_saved(s, saved, values)
            return saved
        _explain_miss(await s.execute(select(INSTANCES.c.deleted, INSTANCES.c.task_state, INSTANCES.c.vm_state)
                                      .where(INSTANCES.c.uuid == uuid)))

    async def _write(s) -> dict | None:
        if returning:  # one round trip where the database can return the updated row
            row = (await s.execute(q, params)).mappings().one_or_none()
            return None if row is None else mapping_to_dict(row)
        if (await s.execute(q, params)).rowcount != 1:
            return None
        return mapping_to_dict((await s.execute(_GET_ANY, {"b_uuid": uuid})).mappings().one())

    def _explain_miss(result):
        current = result.one_or_none()
        if current is None or current.deleted:
            raise exceptions.InstanceNotFound(instance_id=uuid)
        actual = current.task_state
        if expected_task_state is not _UNSET and actual not in _as_list(expected_task_state):
            cls = (exceptions.UnexpectedDeletingTaskStateError if actual == states.DELETING
                   else exceptions.UnexpectedTaskStateError)
            raise cls(instance_uuid=uuid, expected=_as_list(expected_task_state), actual=actual)
        raise exceptions.InstanceInvalidState(
            action="save", instance_uuid=uuid, attr="vm_state", state=current.vm_state)

    if session is not None:
        return await _apply(session)
    # The UPDATE is the compare-and-swap, atomic alone; what follows a miss only explains it. A state
    # change also writes its event stream entry, in the same transaction.
    async with (db.transaction() if event_log.STATE_COLUMNS.intersection(values) else db.autocommit()) as s:
        return await _apply(s)


async def add_fault(db: Database, uuid: str, exc: BaseException | dict, *, host: str | None,
                    details: str | None = None, session=None) -> None:
    """Record a fault (``exc``, or its ``faults.fault_of`` form from a compute host); with
    ``session``, in that transaction (e.g. with the save to ERROR)."""
    fault = exc if isinstance(exc, dict) else faults.fault_of(exc)
    row = InstanceFault(instance_uuid=uuid, code=fault["code"], message=fault["message"][:255], details=details,
                        host=host)
    if session is not None:
        session.add(row)
        return
    async with db.transaction() as s:
        s.add(row)


async def save_with_fault(db: Database, uuid: str, updates: dict, exc: BaseException | dict, *,
                          host: str | None, details: str | None = None, **expected) -> dict:
    """Save (usually to ERROR) and record why, in one transaction: nobody sees the state without its fault."""
    async with db.transaction() as s:
        instance = await save(db, uuid, updates, session=s, **expected)
        await add_fault(db, uuid, exc, host=host, details=details, session=s)
    return instance


def quota_deltas(instance: dict) -> dict[str, int]:
    """What one instance counts against its project's quota (during a resize: the larger of its old
    and new flavors' cores and RAM, as held since the request, ``nefos.control.compute.resize``)."""
    held = ((instance.get("system_metadata") or {}).get(MIGRATION_KEY) or {}).get("quota")
    if held:
        return {"instances": 1, "cores": held["cores"], "ram": held["ram"]}
    return {"instances": 1, "cores": instance.get("vcpus") or 0, "ram": instance.get("memory_mb") or 0}


MIGRATION_KEY = states.MIGRATION_KEY  # the system metadata key of a resize under way


async def destroy(db: Database, uuid: str, *, only_if_unscheduled: bool = False) -> dict | None:
    """Soft-delete the instance and give its quota back, atomically and at most once.

    With ``only_if_unscheduled`` the delete happens only while no host was
    chosen (the API's local delete racing the conductor); returns the row as
    it was, or None when someone else got there first.
    """
    from sqlalchemy import delete as sql_delete

    from nefos.db.models import BlockDeviceMapping, InstanceGroupMember
    from nefos.objects import migrations, quotas

    async with db.transaction() as s:
        row = (await s.execute(select(Instance).where(Instance.uuid == uuid, Instance.deleted == 0))).scalar_one_or_none()
        if row is None:
            return None
        now = utcnow()
        q = update(Instance).where(Instance.id == row.id, Instance.deleted == 0)
        if only_if_unscheduled:
            q = q.where(Instance.host.is_(None))
        result = await s.execute(q.values(
            deleted=Instance.id, deleted_at=now, terminated_at=now, vm_state=states.DELETED,
            task_state=None, power_state=states.NOSTATE, updated_at=now,
        ).execution_options(synchronize_session=False))
        if result.rowcount != 1:
            return None
        before = to_dict(row)
        await quotas.release(s, row.project_id, quota_deltas(before))
        await s.execute(sql_delete(BlockDeviceMapping).where(BlockDeviceMapping.instance_uuid == uuid))
        await s.execute(sql_delete(InstanceGroupMember).where(InstanceGroupMember.instance_uuid == uuid))
        await migrations.delete_for_instance(s, uuid, now)
        await event_log.append(s, event_log.entry(
            event_log.SERVER_DELETED, server_id=uuid, host=row.host,
            data=event_log.server_state({"vm_state": states.DELETED, "power_state": states.NOSTATE})))
        return before


def list_sort_order(sort_keys: list[str], sort_dirs: list[str]) -> list[listing.SortKey]:
    """The sort keys of a server list, as Nova's ``process_sort_params`` (its 400s in
    Nova's InvalidInput wording): a missing direction is the first one given (else desc), created_at
    and id always close the order. Nova's sort keys this cloud keeps no column for sort as equal."""
    for direction in sort_dirs:
        if direction not in ("asc", "desc"):
            raise exceptions.ValidationError(
                "Invalid input received: Unknown sort direction, must be 'desc' or 'asc'")
    if len(sort_dirs) > len(sort_keys):
        raise exceptions.ValidationError("Invalid input received: Sort direction size exceeds sort key size")
    default_dir = sort_dirs[0] if sort_dirs else "desc"
    keys = list(sort_keys)
    dirs = list(sort_dirs) + [default_dir] * (len(keys) - len(sort_dirs))
    for key in ("created_at", "id"):
        if key not in keys:
            keys.append(key)
            dirs.append(default_dir)
    order = []
    for key, direction in zip(keys, dirs):
        column = INSTANCES.c.get(key)
        if column is not None:
            order.append(listing.SortKey(key, column, direction == "desc"))
    return order
