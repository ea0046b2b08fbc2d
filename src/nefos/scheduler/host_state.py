"""A compute node as the scheduler sees it: capacity, usage and its service's state."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from nefos.compute.services import COMPUTE_BINARY
from nefos.db.models import ComputeNode, Service


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
    instances: set[str] = field(default_factory=set)

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


async def load_host_states(db, cfg) -> list[HostState]:
    from nefos.compute.services import is_up
    async with db.reader() as s:
        rows = (await s.execute(
            select(ComputeNode, Service)
            .join(Service, (Service.host == ComputeNode.host) & (Service.binary == COMPUTE_BINARY)
                  & (Service.deleted == 0))
            .where(ComputeNode.deleted == 0))).all()
    return [
        HostState(host=node.host, node=node.hypervisor_hostname, node_id=node.id,
                  availability_zone=svc.availability_zone or cfg.default_availability_zone,
                  service_up=is_up(svc, cfg), service_disabled=bool(svc.disabled),
                  vcpus=node.vcpus, vcpus_used=node.vcpus_used, memory_mb=node.memory_mb,
                  memory_mb_used=node.memory_mb_used, local_gb=node.local_gb,
                  local_gb_used=node.local_gb_used, cpu_allocation_ratio=node.cpu_allocation_ratio,
                  ram_allocation_ratio=node.ram_allocation_ratio,
                  disk_allocation_ratio=node.disk_allocation_ratio, failed_builds=node.failed_builds)
        for node, svc in rows
    ]
