"""``GET /v2.1/nefos-hypervisor-health`` (admin): each compute host's hypervisor connection, apart
from heartbeat liveness.

os-hypervisors' ``state`` is the compute service's heartbeat (up/down) and its ``status`` whether
the service is enabled, as in Nova; Tempest's schemas forbid more fields there. A host whose
service is alive but whose libvirt connection is lost is told apart from a dead host here:
``state`` up with ``hypervisor_connection`` disconnected (and since when, and why), even when an
operator's disable hides the automatic ``AUTO: `` reason. ``vif_plugging_waits``: the host's
network-vif-plugged waits of the last hour (count, p50/p99/max seconds, timeouts, failed), so a
slow L2 agent is visible before it causes timeouts.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import rest
from nefos.control.compute import services as services_mod
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


def _ts(value) -> str | None:
    return value.replace(microsecond=0).isoformat() if value is not None else None


@router.get("/v2.1/nefos-hypervisor-health")
@documented(responses={200: responses.HYPERVISOR_HEALTH})
async def hypervisor_health(request: Request):
    authorize(rest.get_context(request), "nefos:hypervisor-health")
    rt = request.app.state.rt
    computes = await services_mod.list_services(rt.db, rt.cfg, binary=services_mod.COMPUTE_BINARY)
    return {"hypervisor_health": [{
        "host": svc["host"],
        "state": svc["state"],
        "status": svc["status"],
        "disabled_reason": svc["disabled_reason"],
        "hypervisor_connection": svc["hypervisor_connection"] or "unknown",
        "hypervisor_connection_since": _ts(svc["hypervisor_connection_since"]),
        "hypervisor_connection_reason": svc["hypervisor_connection_reason"],
        "vif_plugging_waits": svc["vif_wait_stats"],
    } for svc in computes]}
