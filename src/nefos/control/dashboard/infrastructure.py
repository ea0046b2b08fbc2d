"""The hosts page (capacity and use, up or down, disabled and why, automatic disables marked) and the
networks page (networks, their subnets, ports)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from nefos.control.dashboard.api_client import ApiError
from nefos.control.dashboard.web import cloud_of, render

router = APIRouter()

AUTO_PREFIX = "AUTO: "  # the reason a compute host gives when it disables itself (Nova's)


async def _hosts(request: Request) -> list[dict] | None:
    """Each compute host's row, None when the user may not see hosts (os-services is the admin's)."""
    cloud = cloud_of(request)
    try:
        services, hypervisors = await asyncio.gather(
            cloud.get("compute", "/os-services", binary="nova-compute"), cloud.get("compute", "/os-hypervisors/detail"))
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise
    usage = {h["service"]["host"]: h for h in hypervisors["hypervisors"] if h.get("service")}
    rows = []
    for service in sorted(services["services"], key=lambda s: s["host"]):
        node = usage.get(service["host"], {})
        reason = service.get("disabled_reason") or ""
        rows.append({"host": service["host"], "state": service["state"], "status": service["status"],
                     "reason": reason, "auto": service["status"] == "disabled" and reason.startswith(AUTO_PREFIX),
                     "vcpus": node.get("vcpus", 0), "vcpus_used": node.get("vcpus_used", 0),
                     "memory_mb": node.get("memory_mb", 0), "memory_mb_used": node.get("memory_mb_used", 0),
                     "servers": node.get("running_vms", 0)})
    return rows


@router.get("/hosts", include_in_schema=False)
async def hosts(request: Request):
    return render(request, "hosts.html", hosts=await _hosts(request))


@router.get("/hosts/table", include_in_schema=False)
async def hosts_table(request: Request):
    return render(request, "hosts_table.html", hosts=await _hosts(request))


@router.get("/networks", include_in_schema=False)
async def networks(request: Request):
    cloud = cloud_of(request)
    nets, subnets, ports = await asyncio.gather(cloud.get("network", "/v2.0/networks"),
                                                cloud.get("network", "/v2.0/subnets"),
                                                cloud.get("network", "/v2.0/ports"))
    cidrs: dict[str, list[str]] = {}
    for subnet in subnets["subnets"]:
        cidrs.setdefault(subnet["network_id"], []).append(subnet["cidr"])
    names = {n["id"]: n["name"] for n in nets["networks"]}
    return render(request, "networks.html", networks=[dict(n, cidrs=cidrs.get(n["id"], [])) for n in nets["networks"]],
                  ports=[dict(p, network_name=names.get(p["network_id"], p["network_id"])) for p in ports["ports"]])
