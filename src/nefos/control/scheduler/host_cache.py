"""The host states of one scheduler process, kept between decisions and refreshed before each one,
as Nova's HostManager keeps its HostState objects.

A refresh reads only what changed since the previous one:

* the compute-node and compute-service rows whose ``updated_at`` (or ``created_at``) is at most
  ``CHANGE_MARGIN`` older than when the previous refresh began, soft-deleted ones included (their
  hosts drop). Every write that matters to a decision moves ``updated_at``: claims and releases
  (allocations), build results and capacity changes (objects/compute_nodes.py), enable, disable,
  forced down and delete through the API or the host (services.py, service_rows.py);
* heartbeats do not move it (service_rows.heartbeat). A heartbeat only grows ``last_seen_up``, so
  a host whose cached heartbeat makes it up is up; the services whose cached heartbeat is older
  than half of ``service_down_time`` are read again at each refresh, so a live host never ages
  out and one coming back is seen at once. Up or down is worked out at each decision from the
  cached heartbeat (``HostState.note_time``);
* the aggregates, their hosts and metadata, when their fingerprint moved or one changed lately
  (every change moves its aggregate's ``updated_at``, compute/aggregates.py).

Everything is read again every ``FULL_RELOAD_SECONDS``, a backstop for a change the margin
missed. The cache only advises: the claim (allocations.claim) decides. A state that is behind
loses a claim, and the manager re-reads that node (``reread``) before trying the next host; a
request no host fits is tried once more on everything read afresh.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Mapping

from sqlalchemy import DateTime, bindparam, func, or_, select

from nefos.control.compute.aggregates import host_aggregate_metadata
from nefos.db.models import Aggregate, AggregateHost, AggregateMetadata, utcnow
from nefos.model.binaries import COMPUTE_BINARY
from nefos.objects.service_rows import last_heartbeat
from nefos.control.scheduler.host_state import NODE_COLUMNS, NODES, SERVICE_COLUMNS, SERVICES, HostState

# Rows stamped up to this long before the previous refresh began are read again. ``updated_at`` is
# the writer's clock: the margin covers the clocks of the processes that write (the API, conductors,
# schedulers), a MySQL DATETIME's whole seconds, and a write that commits a moment after it took
# its timestamp.
CHANGE_MARGIN = dt.timedelta(seconds=5)
# Everything is read again this often (seconds), changed or not.
FULL_RELOAD_SECONDS = 60.0
# Service ids per IN list.
_CHUNK = 500

_SINCE = bindparam("b_since", type_=DateTime())
_COMPUTE = SERVICES.c.binary == COMPUTE_BINARY
_ALL_NODES = select(*NODE_COLUMNS).where(NODES.c.deleted == 0)
_CHANGED_NODES = select(*NODE_COLUMNS).where(or_(NODES.c.updated_at >= _SINCE, NODES.c.created_at >= _SINCE))
_NODE = select(*NODE_COLUMNS).where(NODES.c.id == bindparam("b_id"))
_ALL_SERVICES = select(*SERVICE_COLUMNS).where(_COMPUTE, SERVICES.c.deleted == 0)
_CHANGED_SERVICES = select(*SERVICE_COLUMNS).where(
    _COMPUTE, or_(SERVICES.c.updated_at >= _SINCE, SERVICES.c.created_at >= _SINCE))
_SERVICES_BY_ID = select(*SERVICE_COLUMNS).where(SERVICES.c.id.in_(bindparam("b_ids", expanding=True)))
_SERVICES_OF_HOST = select(*SERVICE_COLUMNS).where(_COMPUTE, SERVICES.c.host == bindparam("b_host"))

_AGGREGATES = Aggregate.__table__
# Moves with every change of the aggregates, their hosts or their metadata (with the latest
# updated_at: a change within the same second as the one before is caught by the margin).
_AGGREGATES_FINGERPRINT = select(
    func.count(_AGGREGATES.c.id), func.max(func.coalesce(_AGGREGATES.c.updated_at, _AGGREGATES.c.created_at)),
    select(func.count()).select_from(AggregateHost.__table__).scalar_subquery(),
    select(func.count()).select_from(AggregateMetadata.__table__).scalar_subquery())


class HostStateCache:
    def __init__(self, db, cfg):
        self.db, self.cfg = db, cfg
        self._lock = asyncio.Lock()
        self._nodes: dict[int, Mapping] = {}  # live compute-node rows by id
        self._node_ids_of_host: dict[str, set[int]] = {}
        self._services: dict[str, Mapping] = {}  # each host's live compute-service row
        self._heartbeat_due: dict[int, dt.datetime] = {}  # service id: when to read its heartbeat again
        self._aggregates: dict[str, list[dict[str, str]]] = {}
        self._aggregates_fingerprint: tuple | None = None
        self._states: dict[int, HostState] = {}
        self._ordered: list[HostState] = []  # by node id
        self._read_at: dt.datetime | None = None  # this process's clock as the latest refresh began
        self._loaded_at = float("-inf")  # time.monotonic() at the latest full load
        # What the latest refresh read: full or not, rows of nodes and services, aggregates or not.
        self.last_refresh: dict = {}

    async def host_states(self, *, full: bool = False) -> list[HostState]:
        """Every schedulable node (a live node whose host has a live compute service), by node id,
        up to date as of now (``full``: everything read again)."""
        async with self._lock:
            if full or self._read_at is None or time.monotonic() - self._loaded_at >= FULL_RELOAD_SECONDS:
                await self._load_all()
            else:
                await self._load_changes()
            states = list(self._ordered)
        now = utcnow()
        for state in states:
            state.note_time(now)
        return states

    async def reread(self, node_id: int) -> HostState | None:
        """Read node ``node_id`` and its host's service again (a claim on it was refused); its
        state now, None if it is no longer schedulable."""
        async with self._lock:
            async with self.db.reader(snapshot=True) as s:
                node = (await s.execute(_NODE, {"b_id": node_id})).mappings().one_or_none()
                services = []
                if node is not None:
                    services = (await s.execute(_SERVICES_OF_HOST, {"b_host": node["host"]})).mappings().all()
            self._apply([node if node is not None else {"id": node_id, "deleted": node_id}], services)
            state = self._states.get(node_id)
        if state is not None:
            state.note_time(utcnow())
        return state

    async def _load_all(self) -> None:
        read_at, loaded_at = utcnow(), time.monotonic()
        async with self.db.reader(snapshot=True) as s:
            nodes = (await s.execute(_ALL_NODES)).mappings().all()
            services = (await s.execute(_ALL_SERVICES)).mappings().all()
            fingerprint = tuple((await s.execute(_AGGREGATES_FINGERPRINT)).one())
            aggregates = await host_aggregate_metadata(s)
        self._nodes, self._node_ids_of_host, self._services, self._heartbeat_due, self._states = {}, {}, {}, {}, {}
        self._aggregates, self._aggregates_fingerprint = aggregates, fingerprint
        self._apply(nodes, services)
        self._read_at, self._loaded_at = read_at, loaded_at
        self.last_refresh = {"full": True, "nodes": len(nodes), "services": len(services), "aggregates": True}

    async def _load_changes(self) -> None:
        read_at = utcnow()
        since = self._read_at - CHANGE_MARGIN
        aging = [sid for sid, due in self._heartbeat_due.items() if due < read_at]
        aggregates = None
        async with self.db.reader(snapshot=True) as s:
            nodes = (await s.execute(_CHANGED_NODES, {"b_since": since})).mappings().all()
            services = list((await s.execute(_CHANGED_SERVICES, {"b_since": since})).mappings().all())
            for i in range(0, len(aging), _CHUNK):
                services += (await s.execute(_SERVICES_BY_ID, {"b_ids": aging[i:i + _CHUNK]})).mappings().all()
            fingerprint = tuple((await s.execute(_AGGREGATES_FINGERPRINT)).one())
            latest = fingerprint[1]
            if fingerprint != self._aggregates_fingerprint or (latest is not None and latest >= since):
                aggregates = await host_aggregate_metadata(s)
        if aggregates is not None:
            self._aggregates, self._aggregates_fingerprint = aggregates, fingerprint
        self._apply(nodes, services, aggregates_changed=aggregates is not None)
        self._read_at = read_at
        self.last_refresh = {"full": False, "nodes": len(nodes), "services": len(services),
                             "aggregates": aggregates is not None}

    def _next_heartbeat_read(self, service: Mapping) -> dt.datetime:
        if service["forced_down"]:
            return dt.datetime.max  # down whatever its heartbeat; lifting it moves updated_at
        last = last_heartbeat(service)
        if last is None:
            return dt.datetime.min
        return last + dt.timedelta(seconds=self.cfg.service_down_time / 2)

    def _apply(self, nodes, services, *, aggregates_changed: bool = False) -> None:
        """Take these node and service rows (deleted ones drop) into the states."""
        touched_hosts = set()
        # Deletions first: a host's service registered again after a delete is its live one.
        for row in sorted(services, key=lambda r: r["deleted"] == 0):
            host, current = row["host"], self._services.get(row["host"])
            if row["deleted"]:
                self._heartbeat_due.pop(row["id"], None)
                if current is None or current["id"] != row["id"]:
                    continue
                del self._services[host]
            else:
                if current is not None and current["id"] != row["id"]:
                    self._heartbeat_due.pop(current["id"], None)
                self._services[host] = row
                self._heartbeat_due[row["id"]] = self._next_heartbeat_read(row)
            touched_hosts.add(host)
        touched = set()
        for row in nodes:
            nid = row["id"]
            old = self._nodes.pop(nid, None)
            if old is not None:
                self._node_ids_of_host[old["host"]].discard(nid)
            if not row["deleted"]:
                self._nodes[nid] = row
                self._node_ids_of_host.setdefault(row["host"], set()).add(nid)
            touched.add(nid)
        for host in touched_hosts:
            touched.update(self._node_ids_of_host.get(host, ()))
        members_changed = False
        for nid in touched:
            node = self._nodes.get(nid)
            service = self._services.get(node["host"]) if node is not None else None
            state = self._states.get(nid)
            if service is None:
                if state is not None:
                    del self._states[nid]
                    members_changed = True
                continue
            aggregates = self._aggregates.get(node["host"], [])
            if state is None:
                self._states[nid] = HostState.from_rows(node, service, aggregates, self.cfg)
                members_changed = True
            else:
                state.update(node, service, aggregates, self.cfg)
        if aggregates_changed:
            for state in self._states.values():
                state.set_aggregates(self._aggregates.get(state.host, []),
                                     self._services[state.host]["availability_zone"], self.cfg)
        if members_changed:
            self._ordered = [self._states[nid] for nid in sorted(self._states)]
