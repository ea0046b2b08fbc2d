"""``/v2.1/os-hypervisors``: list, detail, show, statistics, uptime, search, servers (admin only).

2.28: ``cpu_info`` is an object (a JSON string before); 2.33: ``limit``/``marker``;
2.53: ids (and the marker) are uuids, ``hypervisor_hostname_pattern`` and
``with_servers`` query parameters replace the ``search`` and ``servers`` routes
(404 from then on), unknown query parameters are refused; 2.75: ``servers`` is
always there when asked for, even empty; 2.88: the detail view loses the
resource figures and ``cpu_info`` and gains ``uptime``, ``statistics`` and
``uptime`` are gone (404).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import common
from nefos.control.compute.rest.validation import (BOOLEAN, HOSTNAME, NON_NEGATIVE_INTEGER, bool_from_string, is_uuid_like,
                                  query_schema, validate_query)
from nefos.control.compute import hypervisors as hyp_mod
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_RESOURCE_FIELDS = ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used",
                    "free_ram_mb", "free_disk_gb", "current_workload", "running_vms", "disk_available_least")
LIST_QUERY_V253 = query_schema({"limit": NON_NEGATIVE_INTEGER, "marker": {"type": "string"},
                                "hypervisor_hostname_pattern": HOSTNAME, "with_servers": BOOLEAN},
                               strict=True, single=("limit", "marker", "hypervisor_hostname_pattern",
                                                    "with_servers"))
SHOW_QUERY_V253 = query_schema({"with_servers": BOOLEAN}, strict=True, single=("with_servers",))


def _rt(request: Request):
    return request.app.state.rt


def view(request: Request, node: dict, detail: bool, servers: list[dict] | None = None,
         with_servers: bool = False) -> dict:
    version = request.state.api_version
    uuid_ids = version.matches("2.53")
    body = {"id": node["uuid"] if uuid_ids else node["id"], "hypervisor_hostname": node["hypervisor_hostname"],
            "state": node["state"], "status": node["status"]}
    if detail:
        body.update(hypervisor_type=node["hypervisor_type"], hypervisor_version=node["hypervisor_version"],
                    host_ip=node["host_ip"])
        body["service"] = {"id": node["service"]["uuid"] if uuid_ids else node["service"]["id"],
                           "host": node["host"], "disabled_reason": node["service"]["disabled_reason"]}
        if version.matches("2.88"):
            body["uptime"] = hyp_mod.uptime(node) if node["state"] == "up" else None
        else:
            for field in _RESOURCE_FIELDS:
                body[field] = node[field]
            body["cpu_info"] = node["cpu_info"] if version.matches("2.28") else json.dumps(node["cpu_info"])
    if servers:
        body["servers"] = servers
    elif with_servers and version.matches("2.75"):
        body["servers"] = []
    return body


async def _list(request: Request, detail: bool):
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:list" + ("-detail" if detail else ""))
    version = request.state.api_version
    params = request.query_params
    limit = marker = pattern = None
    with_servers = False
    if version.matches("2.53"):
        validate_query(params, LIST_QUERY_V253)
        pattern = params.get("hypervisor_hostname_pattern")
        with_servers = bool_from_string(params.get("with_servers", False), strict=True)
    if version.matches("2.33"):
        limit, marker = common.limit_and_marker(request)
    rt = _rt(request)
    if pattern is not None:
        if "limit" in params or marker:
            raise exceptions.ValidationError("Paging over hypervisors with the hypervisor_hostname_pattern "
                                             "query parameter is not supported.")
        nodes = await _matching(request, pattern)
    else:
        try:
            nodes = await hyp_mod.list_nodes(rt.db, rt.cfg, limit=limit, marker=marker,
                                             by_uuid=version.matches("2.53"))
        except exceptions.MarkerNotFound:
            raise exceptions.ValidationError(f"marker [{marker}] not found") from None
    body: dict = {"hypervisors": [
        view(request, n, detail, await hyp_mod.servers_on(rt.db, n) if with_servers else None, with_servers)
        for n in nodes]}
    if version.matches("2.33") and pattern is None:
        links = common.collection_links(request, body["hypervisors"],
                                        "os-hypervisors/detail" if detail else "os-hypervisors", "id")
        if links:
            body["hypervisors_links"] = links
    return body


@router.get("/v2.1/os-hypervisors")
@documented(responses={200: responses.HYPERVISORS})
async def list_hypervisors(request: Request):
    return await _list(request, detail=False)


@router.get("/v2.1/os-hypervisors/detail")
@documented(responses={200: responses.HYPERVISORS_DETAIL})
async def list_hypervisors_detail(request: Request):
    return await _list(request, detail=True)


@router.get("/v2.1/os-hypervisors/statistics")
@documented(responses={200: responses.HYPERVISOR_STATISTICS})
async def hypervisor_statistics(request: Request):
    if request.state.api_version.matches("2.88"):
        raise exceptions.NotFound("The resource could not be found.")
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:statistics")
    rt = _rt(request)
    return {"hypervisor_statistics": await hyp_mod.statistics(rt.db, rt.cfg)}


async def _get(request: Request, hypervisor_id: str) -> dict:
    """The node named in the URL: an integer id before 2.53 (404 otherwise), a uuid from 2.53 (400)."""
    by_uuid = request.state.api_version.matches("2.53")
    if by_uuid and not is_uuid_like(hypervisor_id):
        raise exceptions.ValidationError(f"Invalid uuid {hypervisor_id}")
    if not by_uuid:
        try:
            rest.parse_int64(hypervisor_id)
        except ValueError:  # no such id fits the database's integers
            raise exceptions.HypervisorNotFound(id=hypervisor_id) from None
    rt = _rt(request)
    return await hyp_mod.get_node(rt.db, rt.cfg, hypervisor_id, by_uuid=by_uuid)


@router.get("/v2.1/os-hypervisors/{hypervisor_id}")
@documented(responses={200: responses.HYPERVISOR})
async def show_hypervisor(request: Request, hypervisor_id: str):
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:show")
    with_servers = False
    if request.state.api_version.matches("2.53"):
        validate_query(request.query_params, SHOW_QUERY_V253)
        with_servers = bool_from_string(request.query_params.get("with_servers", False), strict=True)
    node = await _get(request, hypervisor_id)
    servers = await hyp_mod.servers_on(_rt(request).db, node) if with_servers else None
    return {"hypervisor": view(request, node, detail=True, servers=servers, with_servers=with_servers)}


@router.get("/v2.1/os-hypervisors/{hypervisor_id}/uptime")
@documented(responses={200: responses.HYPERVISOR_UPTIME})
async def hypervisor_uptime(request: Request, hypervisor_id: str):
    if request.state.api_version.matches("2.88"):
        raise exceptions.NotFound("The resource could not be found.")
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:uptime")
    node = await _get(request, hypervisor_id)
    body = view(request, node, detail=False)
    body["uptime"] = hyp_mod.uptime(node)
    return {"hypervisor": body}


async def _matching(request: Request, pattern: str) -> list[dict]:
    rt = _rt(request)
    nodes = await hyp_mod.list_nodes(rt.db, rt.cfg, pattern=pattern)
    if not nodes:
        raise exceptions.NotFound(f"No hypervisor matching '{pattern}' could be found.")
    return nodes


def _before_253(request: Request) -> None:
    """The search and servers routes are gone from 2.53 (query parameters of the list replace them)."""
    if request.state.api_version.matches("2.53"):
        raise exceptions.NotFound("The resource could not be found.")


@router.get("/v2.1/os-hypervisors/{pattern}/search")
@documented(responses={200: responses.HYPERVISORS})
async def search_hypervisors(request: Request, pattern: str):
    _before_253(request)
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:search")
    return {"hypervisors": [view(request, n, detail=False) for n in await _matching(request, pattern)]}


@router.get("/v2.1/os-hypervisors/{pattern}/servers")
@documented(responses={200: responses.HYPERVISOR_SERVERS})
async def hypervisor_servers(request: Request, pattern: str):
    _before_253(request)
    authorize(rest.get_context(request), "os_compute_api:os-hypervisors:servers")
    db = _rt(request).db
    return {"hypervisors": [view(request, n, detail=False, servers=await hyp_mod.servers_on(db, n))
                            for n in await _matching(request, pattern)]}
