"""``/v2.1/os-hypervisors``: list, detail, show, statistics, uptime, search, servers (admin only).

2.28: ``cpu_info`` is an object (a JSON string before); 2.33: ``limit``/``marker``.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request

from nefos import exceptions
from nefos.api import common
from nefos.compute import hypervisors as hyp_mod

router = APIRouter()


def _rt(request: Request):
    return request.app.state.rt


def view(request: Request, node: dict, detail: bool, servers: list[dict] | None = None) -> dict:
    version = request.state.api_version
    uuid_ids = version.matches("2.53")
    body = {"id": node["uuid"] if uuid_ids else node["id"], "hypervisor_hostname": node["hypervisor_hostname"],
            "state": node["state"], "status": node["status"]}
    if detail:
        body.update(hypervisor_type=node["hypervisor_type"], hypervisor_version=node["hypervisor_version"],
                    host_ip=node["host_ip"])
        body["service"] = {"id": node["service"]["uuid"] if uuid_ids else node["service"]["id"],
                           "host": node["host"], "disabled_reason": node["service"]["disabled_reason"]}
        for field in ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used",
                      "free_ram_mb", "free_disk_gb", "current_workload", "running_vms", "disk_available_least"):
            body[field] = node[field]
        body["cpu_info"] = node["cpu_info"] if version.matches("2.28") else json.dumps(node["cpu_info"])
    if servers:
        body["servers"] = servers
    return body


async def _list(request: Request, detail: bool):
    common.require_admin(request, "os_compute_api:os-hypervisors:list" + ("-detail" if detail else ""))
    version = request.state.api_version
    limit = marker = None
    if version.matches("2.33"):
        limit, marker = common.limit_and_marker(request)
    rt = _rt(request)
    nodes = await hyp_mod.list_nodes(rt.db, rt.cfg, limit=limit, marker=marker)
    body: dict = {"hypervisors": [view(request, n, detail) for n in nodes]}
    if version.matches("2.33"):
        links = common.collection_links(request, nodes, "os-hypervisors/detail" if detail else "os-hypervisors",
                                        "id")
        if links:
            body["hypervisors_links"] = links
    return body


@router.get("/v2.1/os-hypervisors")
async def list_hypervisors(request: Request):
    return await _list(request, detail=False)


@router.get("/v2.1/os-hypervisors/detail")
async def list_hypervisors_detail(request: Request):
    return await _list(request, detail=True)


@router.get("/v2.1/os-hypervisors/statistics")
async def hypervisor_statistics(request: Request):
    common.require_admin(request, "os_compute_api:os-hypervisors:statistics")
    rt = _rt(request)
    return {"hypervisor_statistics": await hyp_mod.statistics(rt.db, rt.cfg)}


@router.get("/v2.1/os-hypervisors/{hypervisor_id}")
async def show_hypervisor(request: Request, hypervisor_id: str):
    common.require_admin(request, "os_compute_api:os-hypervisors:show")
    rt = _rt(request)
    return {"hypervisor": view(request, await hyp_mod.get_node(rt.db, rt.cfg, hypervisor_id), detail=True)}


@router.get("/v2.1/os-hypervisors/{hypervisor_id}/uptime")
async def hypervisor_uptime(request: Request, hypervisor_id: str):
    common.require_admin(request, "os_compute_api:os-hypervisors:uptime")
    rt = _rt(request)
    node = await hyp_mod.get_node(rt.db, rt.cfg, hypervisor_id)
    body = view(request, node, detail=False)
    body["uptime"] = hyp_mod.uptime(node)
    return {"hypervisor": body}


async def _matching(request: Request, pattern: str) -> list[dict]:
    rt = _rt(request)
    nodes = await hyp_mod.list_nodes(rt.db, rt.cfg, pattern=pattern)
    if not nodes:
        raise exceptions.NotFound(f"No hypervisor matching '{pattern}' could be found.")
    return nodes


@router.get("/v2.1/os-hypervisors/{pattern}/search")
async def search_hypervisors(request: Request, pattern: str):
    common.require_admin(request, "os_compute_api:os-hypervisors:search")
    return {"hypervisors": [view(request, n, detail=False) for n in await _matching(request, pattern)]}


@router.get("/v2.1/os-hypervisors/{pattern}/servers")
async def hypervisor_servers(request: Request, pattern: str):
    common.require_admin(request, "os_compute_api:os-hypervisors:servers")
    db = _rt(request).db
    return {"hypervisors": [view(request, n, detail=False, servers=await hyp_mod.servers_on(db, n))
                            for n in await _matching(request, pattern)]}
