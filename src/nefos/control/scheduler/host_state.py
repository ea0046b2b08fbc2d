"""A compute node as the scheduler sees it: capacity, usage, its service's state and its aggregates.

The scheduler keeps these between decisions (scheduler/host_cache.py) and builds them here from
a ``compute_nodes`` row, its host's compute ``services`` row and the host's aggregates.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import bindparam, select

from nefos.control.compute.aggregates import AZ_KEY
from nefos.objects.service_rows import up_window
from nefos.db.models import ComputeNode, Instance, Service

NODES = ComputeNode.__table__
SERVICES = Service.__table__

# What a host state is built from (deleted: the cache drops the rows a delete marked).
NODE_COLUMNS = (NODES.c.id, NODES.c.host, NODES.c.hypervisor_hostname, NODES.c.vcpus, NODES.c.vcpus_used,
                NODES.c.memory_mb, NODES.c.memory_mb_used, NODES.c.local_gb, NODES.c.local_gb_used,
                NODES.c.cpu_allocation_ratio, NODES.c.ram_allocation_ratio, NODES.c.disk_allocation_ratio,
                NODES.c.failed_builds, NODES.c.deleted)
SERVICE_COLUMNS = (SERVICES.c.id, SERVICES.c.host, SERVICES.c.availability_zone, SERVICES.c.disabled,
                   SERVICES.c.forced_down, SERVICES.c.last_seen_up, SERVICES.c.updated_at,
                   SERVICES.c.created_at, SERVICES.c.deleted)

_PLACED = select(Instance.uuid, Instance.host).where(
    Instance.uuid.in_(bindparam("b_uuids", expanding=True)), Instance.deleted == 0)


@dataclass
class HostState:
    host: str
    node: str
    node_id: int
    availability_zone: str
    service_up: bool
    service_disabled: bool
    vcpus: int
    vcpus_used: int
    memory_mb: int
    memory_mb_used: int
    local_gb: int
    local_gb_used: int
    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    disk_allocation_ratio: float
    failed_builds: int
    # Of the instances a request's hints name, those on this host (same_host / different_host).
    instances: set[str] = field(default_factory=set)
    # The metadata of each aggregate the host is in.
    aggregates: list[dict[str, str]] = field(default_factory=list)
    # When the service counts as up (services.up_window): ``service_up`` is set from it for each
    # decision (``note_time``), so a cached state follows time passing.
    up_window: tuple[dt.datetime, dt.datetime] | None = None

    @property
    def free_ram_mb(self) -> float:
        return self.memory_mb * self.ram_allocation_ratio - self.memory_mb_used

    @property
    def free_vcpus(self) -> float:
        return self.vcpus * self.cpu_allocation_ratio - self.vcpus_used

    @property
    def free_disk_gb(self) -> float:
        return self.local_gb * self.disk_allocation_ratio - self.local_gb_used

    def consume(self, vcpus: int, memory_mb: int, disk_gb: int) -> None:
        self.vcpus_used += vcpus
        self.memory_mb_used += memory_mb
        self.local_gb_used += disk_gb

    def note_time(self, now: dt.datetime) -> None:
        window = self.up_window
        self.service_up = window is not None and window[0] <= now <= window[1]

    def set_aggregates(self, aggregates: list[dict[str, str]], service_zone: str | None, cfg) -> None:
        """As ``services.zone_of``: the aggregates' zone, else the service's, else the default."""
        self.aggregates = aggregates
        self.availability_zone = (next((md[AZ_KEY] for md in aggregates if AZ_KEY in md), None)
                                  or service_zone or cfg.default_availability_zone)

    def update(self, node: Mapping, service: Mapping, aggregates: list[dict[str, str]], cfg) -> None:
        """Take the values of ``node`` (a compute_nodes row), ``service`` (its host's compute
        service row) and the host's aggregates."""
        self.host, self.node, self.node_id = node["host"], node["hypervisor_hostname"], node["id"]
        self.vcpus, self.vcpus_used = node["vcpus"], node["vcpus_used"]
        self.memory_mb, self.memory_mb_used = node["memory_mb"], node["memory_mb_used"]
        self.local_gb, self.local_gb_used = node["local_gb"], node["local_gb_used"]
        self.cpu_allocation_ratio = node["cpu_allocation_ratio"]
        self.ram_allocation_ratio = node["ram_allocation_ratio"]
        self.disk_allocation_ratio = node["disk_allocation_ratio"]
        self.failed_builds = node["failed_builds"]
        self.service_disabled = bool(service["disabled"])
        self.up_window = up_window(service, cfg)
        self.set_aggregates(aggregates, service["availability_zone"], cfg)

    @classmethod
    def from_rows(cls, node: Mapping, service: Mapping, aggregates: list[dict[str, str]], cfg) -> HostState:
        state = cls(host="", node="", node_id=0, availability_zone="", service_up=False, service_disabled=False,
                    vcpus=0, vcpus_used=0, memory_mb=0, memory_mb_used=0, local_gb=0, local_gb_used=0,
                    cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0, disk_allocation_ratio=1.0,
                    failed_builds=0)
        state.update(node, service, aggregates, cfg)
        return state


async def hinted_placements(db, instance_uuids: set[str] | frozenset[str]) -> dict[str, set[str]]:
    """Each host with those of ``instance_uuids`` it hosts (read for each request that names them)."""
    placed: dict[str, set[str]] = {}
    if instance_uuids:
        async with db.reader() as s:
            for uuid, host in (await s.execute(_PLACED, {"b_uuids": sorted(instance_uuids)})).all():
                placed.setdefault(host, set()).add(uuid)
    return placed
