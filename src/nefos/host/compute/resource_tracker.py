"""The compute host's view of its nodes: reports capacity, checks claims (its node rows are
written by the conductor, ``nefos.objects.compute_nodes``).

Usage counters on ``compute_nodes`` move only with claims (see
``nefos.objects.allocations``); at start-up they are recomputed from the
allocations so a crash can never leave them drifting.
"""

from __future__ import annotations

from nefos import exceptions, metrics

# What a node's row says of its use, as the host's metrics (nova-compute's os-hypervisors fields).
_REPORTED = ("vcpus", "vcpus_used", "memory_mb", "memory_mb_used", "local_gb", "local_gb_used", "running_vms")


class ResourceTracker:
    def __init__(self, rt, conductor, host: str, driver):
        self.rt = rt
        self.conductor = conductor
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
            row = await self.conductor.compute_node_update(None, self.host, node, self.node_uuid, capacity,
                                                           heal_usage=heal_usage)
            self.node_ids[node] = row["id"]
            self.failing_nodes[node] = bool(row["failed_builds"])
            for resource, value in {**capacity, **row}.items():
                if resource in _REPORTED and value is not None:
                    metrics.HYPERVISOR_USAGE.labels(self.host, node, resource).set(value)

    async def instance_claim(self, instance: dict, node: str, alloc: dict | None = None) -> None:
        """The scheduler's claim for this instance (``alloc`` when the caller has it) must be on
        this host's ``node``."""
        await self._claim_is_here("instance", instance["uuid"], node, alloc)

    async def move_claim(self, migration: dict) -> None:
        """A move's claim (a resize, cold or live migration, evacuation) must be on this host: the
        conductor claims for the migration's uuid on its ``dest_node``. Raises Nova's error of a
        move claim that does not hold, ``ComputeResourcesUnavailable``."""
        await self._claim_is_here("migration", migration["uuid"], migration["dest_node"])

    async def _claim_is_here(self, consumer: str, consumer_uuid: str, node: str, alloc: dict | None = None) -> None:
        if alloc is None:
            alloc = await self.conductor.allocation_of(None, consumer_uuid)
        if alloc is None or alloc["compute_node_id"] != self.node_ids.get(node):
            raise exceptions.ComputeResourcesUnavailable(
                reason=f"no resource claim for {consumer} {consumer_uuid} on {self.host}/{node}")

    async def record_build_result(self, node: str, success: bool) -> None:
        """Count consecutive build failures (the scheduler weighs hosts down by it); a success resets."""
        node_id = self.node_ids.get(node)
        if node_id is None:
            return
        if success and not self.failing_nodes.get(node):
            return  # this host is the only writer of its count: nothing to reset
        await self.conductor.compute_node_record_build_result(None, node_id, success)
        self.failing_nodes[node] = not success
