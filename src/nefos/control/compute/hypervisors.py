"""Hypervisors: the compute nodes (table ``compute_nodes``) with their compute service's state."""

from __future__ import annotations

import contextlib

from sqlalchemy import func, or_, select

from nefos import exceptions
from nefos.control.compute import services as services_mod
from nefos.db.models import ComputeNode, Instance, Service, utcnow

# What the fake driver reports (Nova's fake driver's cpu_info).
FAKE_CPU_INFO = {"arch": "x86_64", "model": "Nehalem", "vendor": "Intel",
                 "features": ["pge", "clflush"], "topology": {"cores": 1, "threads": 1, "sockets": 4}}


def _node_dict(node: ComputeNode, svc: Service, cfg, workload: int) -> dict:
    d = node.to_dict()
    free_disk = (node.local_gb or 0) - (node.local_gb_used or 0)
    d.update(
        free_ram_mb=(node.memory_mb or 0) - (node.memory_mb_used or 0),
        free_disk_gb=free_disk,
        disk_available_least=free_disk,
        current_workload=workload,
        cpu_info=FAKE_CPU_INFO if (node.hypervisor_type or "fake") == "fake" else {},
        state="up" if services_mod.is_up(svc, cfg) else "down",
        status="disabled" if svc.disabled else "enabled",
        service={"id": svc.id, "uuid": svc.uuid, "host": node.host,
                 "disabled_reason": svc.disabled_reason, "created_at": svc.created_at},
    )
    return d


async def _load(session, cfg, q) -> list[dict]:
    """Nodes from query ``q`` joined to their (live) compute service; nodes without one are skipped."""
    rows = (await session.execute(
        q.join(Service, (Service.host == ComputeNode.host) & (Service.binary == services_mod.COMPUTE_BINARY)
               & (Service.deleted == 0))
        .add_columns(Service).where(ComputeNode.deleted == 0).order_by(ComputeNode.id))).all()
    if not rows:
        return []
    busy = or_(Instance.task_state.is_not(None), Instance.vm_state == "building")
    workloads = dict((await session.execute(
        select(Instance.node, func.count(Instance.id))
        .where(Instance.deleted == 0, busy, Instance.node.in_([r[0].hypervisor_hostname for r in rows]))
        .group_by(Instance.node))).all())
    return [_node_dict(node, svc, cfg, workloads.get(node.hypervisor_hostname, 0)) for node, svc in rows]


async def list_nodes(db, cfg, *, pattern: str | None = None, limit: int | None = None,
                     marker: int | str | None = None, by_uuid: bool = False) -> list[dict]:
    """The nodes (by id); ``marker`` is the last one's id, or (``by_uuid``, from 2.53) its uuid."""
    q = select(ComputeNode)
    if pattern is not None:
        q = q.where(ComputeNode.hypervisor_hostname.contains(pattern, autoescape=True))
    async with db.reader() as s:
        if marker is not None:
            marker_id = None
            if by_uuid:
                marker_id = (await s.execute(select(ComputeNode.id).where(
                    ComputeNode.uuid == str(marker), ComputeNode.deleted == 0))).scalar_one_or_none()
            else:
                with contextlib.suppress(TypeError, ValueError):
                    marker_id = (await s.execute(select(ComputeNode.id).where(
                        ComputeNode.id == int(marker), ComputeNode.deleted == 0))).scalar_one_or_none()
            if marker_id is None:
                raise exceptions.MarkerNotFound(f"marker [{marker}] not found", marker=marker)
            q = q.where(ComputeNode.id > marker_id)
        if limit is not None:
            q = q.limit(limit)
        return await _load(s, cfg, q)


async def get_node(db, cfg, node_id, *, by_uuid: bool = False) -> dict:
    """The node with integer id ``node_id``, or (``by_uuid``, from 2.53) with that uuid."""
    if by_uuid:
        where = ComputeNode.uuid == str(node_id)
    else:
        try:
            where = ComputeNode.id == int(node_id)
        except (TypeError, ValueError):
            raise exceptions.HypervisorNotFound(id=node_id)
    async with db.reader() as s:
        nodes = await _load(s, cfg, select(ComputeNode).where(where))
    if not nodes:
        raise exceptions.HypervisorNotFound(id=node_id)
    return nodes[0]


async def statistics(db, cfg) -> dict:
    async with db.reader() as s:
        nodes = await _load(s, cfg, select(ComputeNode))
    keys = ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used",
            "free_ram_mb", "free_disk_gb", "current_workload", "running_vms", "disk_available_least")
    stats = {k: sum(int(n[k] or 0) for n in nodes) for k in keys}
    stats["count"] = len(nodes)
    return stats


def uptime(node: dict) -> str:
    """An ``uptime``-style line for the node's host, counted from its compute service's registration."""
    if node["state"] != "up":
        raise exceptions.ValidationError(f"Compute service of {node['host']} is unavailable at this time.")
    now = utcnow()
    started = node["service"].get("created_at") or now
    seconds = max(0, int((now - started).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, minutes = rest // 3600, rest % 3600 // 60
    return (f" {now:%H:%M:%S} up {days} days, {hours:2d}:{minutes:02d},  1 user,  "
            "load average: 0.00, 0.00, 0.00")


async def servers_on(db, node: dict) -> list[dict]:
    async with db.reader() as s:
        rows = (await s.execute(select(Instance.uuid, Instance.display_name).where(
            Instance.deleted == 0, Instance.host == node["host"],
            Instance.node == node["hypervisor_hostname"]).order_by(Instance.id))).all()
    return [{"uuid": u, "name": n or ""} for u, n in rows]
