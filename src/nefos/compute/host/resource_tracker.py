"""The compute host's view of its nodes: reports capacity, checks claims.

Usage counters on ``compute_nodes`` move only with claims (see
``nefos.objects.allocations``); at start-up they are recomputed from the
allocations so a crash can never leave them drifting.
"""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import select, update

from nefos import exceptions
from nefos.db.models import ComputeNode
from nefos.objects import allocations


class ResourceTracker:
    def __init__(self, rt, host: str, driver):
        self.rt = rt
        self.host = host
        self.driver = driver
        self.node_ids: dict[str, int] = {}
        self.node_uuid: str | None = None  # the stable identity (compute/host/node_identity.py), if one
        self.failing_nodes: dict[str, bool] = {}

    async def update_available_resource(self, *, heal_usage: bool = False) -> None:
        cfg = self.rt.cfg
        for node in self.driver.get_available_nodes():
            res = await self.driver.get_available_resource(node)
            capacity = dict(vcpus=res["vcpus"], memory_mb=res["memory_mb"], local_gb=res["local_gb"],
                            hypervisor_type=res["hypervisor_type"],
                            hypervisor_version=res["hypervisor_version"], host_ip=res.get("host_ip"),
                            cpu_allocation_ratio=cfg.cpu_allocation_ratio,
                            ram_allocation_ratio=cfg.ram_allocation_ratio,
                            disk_allocation_ratio=cfg.disk_allocation_ratio)
            async with self.rt.db.transaction() as s:
                row = (await s.execute(select(ComputeNode).where(
                    ComputeNode.host == self.host, ComputeNode.hypervisor_hostname == node,
                    ComputeNode.deleted == 0))).scalar_one_or_none()
                if row is None:
                    row = ComputeNode(uuid=self.node_uuid or str(uuidlib.uuid4()), host=self.host,
                                      hypervisor_hostname=node, **capacity)
                    s.add(row)
                    await s.flush()
                else:
                    await s.execute(update(ComputeNode).where(ComputeNode.id == row.id).values(**capacity))
                self.node_ids[node] = row.id
                self.failing_nodes[node] = bool(row.failed_builds)
                if heal_usage:
                    await allocations.recount(s, row.id)

    async def instance_claim(self, instance: dict, node: str) -> None:
        """The scheduler's claim for this instance must be on this host's ``node``."""
        node_id = self.node_ids.get(node)
        alloc = await allocations.get(self.rt.db, instance["uuid"])
        if alloc is None or alloc["compute_node_id"] != node_id:
            raise exceptions.ComputeResourcesUnavailable(
                reason=f"no resource claim for instance {instance['uuid']} on {self.host}/{node}")

    async def record_build_result(self, node: str, success: bool) -> None:
        """Count consecutive build failures (the scheduler weighs hosts down by it); a success resets."""
        node_id = self.node_ids.get(node)
        if node_id is None:
            return
        if success and not self.failing_nodes.get(node):
            return  # this host is the only writer of its count: nothing to reset
        values = {"failed_builds": 0} if success else {"failed_builds": ComputeNode.failed_builds + 1}
        async with self.rt.db.transaction() as s:
            await s.execute(update(ComputeNode).where(ComputeNode.id == node_id).values(**values))
        self.failing_nodes[node] = not success
