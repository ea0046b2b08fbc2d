"""A compute node as the scheduler sees it: capacity, usage, its service's state and its aggregates.

Aggregates are read from the database with the hosts, for each scheduling decision (the scheduler
may run in another process than the API that changes them), as Nova's scheduler would after an
aggregate update reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import and_, select

from nefos.compute.aggregates import AZ_KEY, host_aggregate_metadata
from nefos.compute.services import COMPUTE_BINARY
from nefos.db.models import ComputeNode, Instance, Service

NODES = ComputeNode.__table__
SERVICES = Service.__table__

# Every live compute node with its service's state (built once: it runs for every boot).
_HOSTS = (
    select(NODES.c.host, NODES.c.hypervisor_hostname, NODES.c.id, NODES.c.vcpus, NODES.c.vcpus_used,
           NODES.c.memory_mb, NODES.c.memory_mb_used, NODES.c.local_gb, NODES.c.local_gb_used,
           NODES.c.cpu_allocation_ratio, NODES.c.ram_allocation_ratio, NODES.c.disk_allocation_ratio,
           NODES.c.failed_builds, SERVICES.c.availability_zone, SERVICES.c.disabled,
           SERVICES.c.forced_down, SERVICES.c.last_seen_up, SERVICES.c.updated_at, SERVICES.c.created_at)
    .join(SERVICES, and_(SERVICES.c.host == NODES.c.host, SERVICES.c.binary == COMPUTE_BINARY,
                         SERVICES.c.deleted == 0))
    .where(NODES.c.deleted == 0))


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


def _zone(aggregates: list[dict[str, str]], service_zone: str | None, cfg) -> str:
    """As ``services.zone_of``: the aggregates' zone, else the service's, else the default."""
    return (next((md[AZ_KEY] for md in aggregates if AZ_KEY in md), None) or service_zone
            or cfg.default_availability_zone)


async def load_host_states(db, cfg, instance_uuids: set[str] | frozenset[str] = frozenset()) -> list[HostState]:
    """Every live compute node, with its aggregates and which of ``instance_uuids`` it hosts."""
    from nefos.compute.services import is_up
    async with db.reader(snapshot=True) as s:
        rows = (await s.execute(_HOSTS)).mappings().all()
        aggregates = await host_aggregate_metadata(s)
        placed: dict[str, set[str]] = {}
        if instance_uuids:
            for uuid, host in (await s.execute(select(Instance.uuid, Instance.host).where(
                    Instance.uuid.in_(sorted(instance_uuids)), Instance.deleted == 0))).all():
                placed.setdefault(host, set()).add(uuid)
    return [
        HostState(host=row["host"], node=row["hypervisor_hostname"], node_id=row["id"],
                  availability_zone=_zone(aggregates.get(row["host"], []), row["availability_zone"], cfg),
                  service_up=is_up(row, cfg), service_disabled=bool(row["disabled"]),
                  vcpus=row["vcpus"], vcpus_used=row["vcpus_used"], memory_mb=row["memory_mb"],
                  memory_mb_used=row["memory_mb_used"], local_gb=row["local_gb"],
                  local_gb_used=row["local_gb_used"], cpu_allocation_ratio=row["cpu_allocation_ratio"],
                  ram_allocation_ratio=row["ram_allocation_ratio"],
                  disk_allocation_ratio=row["disk_allocation_ratio"], failed_builds=row["failed_builds"],
                  instances=set(placed.get(row["host"], ())), aggregates=aggregates.get(row["host"], []))
        for row in rows
    ]
