"""``/v2.1/os-hosts`` (admin only; 404 from 2.43, where Nova replaced it with os-services and
os-hypervisors): the hosts and their services, a host's resource usage, enabling or disabling a
compute host, maintenance mode and host power actions.

As Nova's hosts controller:

* list: the services that are not disabled (API services left out), each as
  ``{host_name, service (its topic), zone}``; ``zone`` filters on the zone (``internal`` for
  services other than compute).
* show: the compute node's ``(total)`` and ``(used_now)`` rows, ``(used_max)`` summed over the
  host's instances' flavors, then one row per project with instances there.
* update: ``status`` enable/disable (any case) sets the compute service's disabled flag;
  ``maintenance_mode`` is 501, as on Nova's libvirt driver (no driver here has one).
* startup / shutdown / reboot: 501, as on every Nova driver but the fake and the removed XenAPI.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import select

from nefos import exceptions, rest
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import validate
from nefos.control.compute import services as services_mod
from nefos.db.models import ComputeNode, Instance
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

_MAX = "2.42"
_TOGGLE = {"type": "string", "enum": ["enable", "disable", "Enable", "Disable", "ENABLE", "DISABLE"]}
UPDATE = {
    "type": "object",
    "properties": {"status": _TOGGLE, "maintenance_mode": _TOGGLE},
    "anyOf": [{"required": ["status"]}, {"required": ["maintenance_mode"]}],
    "additionalProperties": False,
}
LIST_QUERY = {"type": "object", "properties": {"zone": {"type": "string"}}, "additionalProperties": True}
# API services are no hosts of this list (Nova's api_services, and Nefos's own API service).
_API_BINARIES = ("nova-osapi_compute", "nova-metadata", "nefos-api")
_NOT_SUPPORTED = "The requested functionality is not supported."


def _start(request: Request, rule: str):
    microversion.require_at_most(request, _MAX)
    return authorize(rest.get_context(request), f"os_compute_api:os-hosts:{rule}")


@router.get("/v2.1/os-hosts")
@documented(query=LIST_QUERY, responses={200: responses.HOSTS})
async def list_hosts(request: Request):
    _start(request, "list")
    rt = request.app.state.rt
    zone = request.query_params.get("zone")
    hosts = []
    for svc in await services_mod.list_services(rt.db, rt.cfg):
        if svc["disabled"] or svc["binary"] in _API_BINARIES or (zone and svc["zone"] != zone):
            continue
        hosts.append({"host_name": svc["host"], "service": svc["topic"] or svc["binary"].removeprefix("nova-"), "zone": svc["zone"]})
    return {"hosts": hosts}


def _row(host: str, project: str, cpu: int, memory_mb: int, disk_gb: int) -> dict:
    return {"resource": {"host": host, "project": project, "cpu": cpu, "memory_mb": memory_mb,
                         "disk_gb": disk_gb}}


@router.get("/v2.1/os-hosts/{host_name}")
@documented(responses={200: responses.HOST_RESOURCES})
async def show_host(request: Request, host_name: str):
    _start(request, "show")
    async with request.app.state.rt.db.reader() as s:
        node = (await s.execute(select(ComputeNode).where(ComputeNode.host == host_name, ComputeNode.deleted == 0)
                                .order_by(ComputeNode.id).limit(1))).scalar_one_or_none()
        if node is None:
            raise exceptions.ComputeHostNotFound(host=host_name)
        instances = (await s.execute(select(Instance.project_id, Instance.vcpus, Instance.memory_mb,
                                            Instance.root_gb, Instance.ephemeral_gb)
                                     .where(Instance.host == host_name, Instance.deleted == 0)
                                     .order_by(Instance.id))).all()
    rows = [_row(host_name, "(total)", node.vcpus, node.memory_mb, node.local_gb),
            _row(host_name, "(used_now)", node.vcpus_used, node.memory_mb_used, node.local_gb_used)]
    used_max = [0, 0, 0]
    by_project: dict[str, list[int]] = {}
    for inst in instances:
        usage = (inst.vcpus or 0, inst.memory_mb or 0, (inst.root_gb or 0) + (inst.ephemeral_gb or 0))
        project = by_project.setdefault(inst.project_id, [0, 0, 0])
        for i, value in enumerate(usage):
            used_max[i] += value
            project[i] += value
    rows.append(_row(host_name, "(used_max)", *used_max))
    rows.extend(_row(host_name, project, *usage) for project, usage in by_project.items())
    return {"host": rows}


async def _compute_host(request: Request, host_name: str) -> None:
    """404 (Nova's HostNotFound) unless ``host_name`` runs a compute service."""
    rt = request.app.state.rt
    if not await services_mod.list_services(rt.db, rt.cfg, host=host_name, binary=services_mod.COMPUTE_BINARY):
        raise exceptions.NotFound(f"Host {host_name} could not be found.")


@router.put("/v2.1/os-hosts/{host_name}")
@documented(request=UPDATE, responses={200: responses.HOST_UPDATED})
async def update_host(request: Request, host_name: str):
    microversion.require_at_most(request, _MAX)
    body = await rest.json_body(request)
    validate(body, UPDATE)
    authorize(rest.get_context(request), "os_compute_api:os-hosts:update")
    result = {"host": host_name}
    if "status" in body:
        await _compute_host(request, host_name)
        enable = body["status"].strip().lower() == "enable"
        await services_mod.set_disabled(request.app.state.rt.db, host_name, services_mod.COMPUTE_BINARY,
                                        not enable)
        result["status"] = "enabled" if enable else "disabled"
    if "maintenance_mode" in body:
        await _compute_host(request, host_name)
        raise exceptions.NotSupported(_NOT_SUPPORTED)
    return result


async def _power_action(request: Request, host_name: str, rule: str) -> dict:
    _start(request, rule)
    await _compute_host(request, host_name)
    raise exceptions.NotSupported(_NOT_SUPPORTED)


@router.get("/v2.1/os-hosts/{host_name}/startup")
@documented(responses={200: responses.HOST_POWER_ACTION})
async def startup_host(request: Request, host_name: str):
    return await _power_action(request, host_name, "start")


@router.get("/v2.1/os-hosts/{host_name}/shutdown")
@documented(responses={200: responses.HOST_POWER_ACTION})
async def shutdown_host(request: Request, host_name: str):
    return await _power_action(request, host_name, "shutdown")


@router.get("/v2.1/os-hosts/{host_name}/reboot")
@documented(responses={200: responses.HOST_POWER_ACTION})
async def reboot_host(request: Request, host_name: str):
    return await _power_action(request, host_name, "reboot")
