"""The scheduler service: ``select_destinations`` filters, weighs and claims.

Claims happen here (as Placement allocations do in Nova), each one an
atomic conditional update, so concurrent boots cannot overcommit a host:
when a claim loses a race the node is read again and the next-best host is
tried. A request for several instances is all-or-nothing.

The host states are this process's, kept between decisions and refreshed
before each (scheduler/host_cache.py).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time

from nefos import exceptions, metrics
from nefos.bus import Endpoint, interfaces
from nefos.objects import allocations
from nefos.control.scheduler import filters, weights
from nefos.control.scheduler.host_cache import HostStateCache
from nefos.control.scheduler.host_state import HostState, hinted_placements

LOG = logging.getLogger(__name__)


def flavor_disk_gb(flavor: dict) -> int:
    return flavor.get("root_gb", 0) + flavor.get("ephemeral_gb", 0) + (flavor.get("swap", 0) + 1023) // 1024


# How many of the latest decisions' durations ``decision_stats`` summarises.
DECISION_WINDOW = 100_000


def _percentile(ordered: list[float], p: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


class SchedulerManager(Endpoint):
    rpc_interface = interfaces.SCHEDULER

    def __init__(self, rt):
        self.rt = rt
        self.host_cache = HostStateCache(rt.db, rt.cfg)
        # Seconds each select_destinations took here, host states read to claims made (or refused).
        self.decision_seconds: collections.deque[float] = collections.deque(maxlen=DECISION_WINDOW)

    async def decision_stats(self, ctx, reset: bool = False) -> dict:
        """This scheduler's decision times (for operators and benchmarks: call ``scheduler.<host>``):
        how many, p50, p99 and max in milliseconds, over the latest ``DECISION_WINDOW``."""
        ordered = sorted(self.decision_seconds)
        if reset:
            self.decision_seconds.clear()

        def ms(value):
            return None if value is None else round(value * 1000, 2)
        return {"host": self.rt.cfg.host, "count": len(ordered), "p50_ms": ms(_percentile(ordered, 0.5)),
                "p99_ms": ms(_percentile(ordered, 0.99)), "max_ms": ms(ordered[-1] if ordered else None)}

    async def _group_hosts(self, group: dict) -> list[str]:
        """The hosts the group's members are on or claimed on now (one entry per member).

        Read from the database by group, not from the request spec: the spec's member list
        is as old as the request, and members scheduled meanwhile (whose builds may not even
        have started) must count.
        """
        from nefos.objects.server_groups import member_placements
        return [p["host"] for p in await member_placements(self.rt.db, group["uuid"])]

    async def _host_states(self, spec: dict, *, full: bool = False) -> list[HostState]:
        """The host states up to date (``full``: all read again), with which of the instances the
        request's hints name each host runs (on copies: the cached states are shared)."""
        hosts = await self.host_cache.host_states(full=full)
        placed = await hinted_placements(self.rt.db, filters.hinted_instances(spec))
        if placed:
            hosts = [dataclasses.replace(h, instances=set(placed[h.host])) if h.host in placed else h
                     for h in hosts]
        return hosts

    async def select_destinations(self, ctx, request_spec: dict, instance_uuids: list[str]) -> list[dict]:
        started = time.perf_counter()
        result = "error"
        try:
            selections = await self._select_destinations(request_spec, instance_uuids)
            result = "placed"
            return selections
        except exceptions.NoValidHost:
            result = "no_valid_host"
            raise
        finally:
            took = time.perf_counter() - started
            self.decision_seconds.append(took)
            metrics.SCHEDULER_DECISIONS.labels(result).inc()
            metrics.SCHEDULER_DECISION_TIME.observe(took)

    async def _select_destinations(self, request_spec: dict, instance_uuids: list[str]) -> list[dict]:
        spec = dict(request_spec)
        group = spec.get("instance_group")
        if group:
            group = dict(group)
            group["hosts"] = await self._group_hosts(group)
            spec["instance_group"] = group
        hosts = await self._host_states(spec)
        reloaded = False
        flavor = spec["flavor"]
        disk = flavor_disk_gb(flavor)
        selections: list[dict] = []
        try:
            for uuid in instance_uuids:
                chosen = await self._place_one(uuid, hosts, spec, flavor, disk)
                if chosen is None and not reloaded:
                    # The cached states may be behind (a release or an enable the refresh missed):
                    # no host is refused on them alone.
                    reloaded = True
                    hosts = await self._host_states(spec, full=True)
                    chosen = await self._place_one(uuid, hosts, spec, flavor, disk)
                if chosen is None:
                    raise exceptions.NoValidHost(
                        reason=f"There are not enough hosts available ({len(hosts)} known).")
                selections.append({"host": chosen.host, "node": chosen.node,
                                   "compute_node_id": chosen.node_id,
                                   "availability_zone": chosen.availability_zone})
                if group is not None:
                    group["hosts"].append(chosen.host)
        except BaseException:
            for uuid in instance_uuids[:len(selections)]:
                await allocations.release(self.rt.db, uuid)
            raise
        return selections

    async def _place_one(self, uuid: str, hosts: list[HostState], spec: dict, flavor: dict,
                         disk: int) -> HostState | None:
        candidates = weights.weigh_hosts(filters.filter_hosts(hosts, spec), spec, self.rt.cfg)
        for host in candidates:
            async with self.rt.db.transaction() as s:
                ok = await allocations.claim(s, uuid, host.node_id, vcpus=flavor["vcpus"],
                                             memory_mb=flavor["memory_mb"], disk_gb=disk)
            if ok:
                host.consume(flavor["vcpus"], flavor["memory_mb"], disk)
                return host
            LOG.debug("claim for %s on %s lost a race; trying the next host", uuid, host.host)
            await self.host_cache.reread(host.node_id)
        return None

