"""``GET /v2.1/servers/{id}/diagnostics`` (admin by default): the guest's figures, asked of its
compute host over the bus. Before 2.48 in the driver's own free-form keys; from 2.48 in the
standard form (state, driver, hypervisor, uptime, config drive, per-CPU, per-NIC and per-disk
details, memory). 409 when the server has no host yet or its guest is not running, as Nova."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


@router.get("/v2.1/servers/{server_id}/diagnostics")
@documented(responses={200: responses.DIAGNOSTICS})
async def server_diagnostics(request: Request, server_id: str):
    ctx = rest.get_context(request)
    compute_api = request.app.state.compute_api
    instance = await compute_api.get(ctx, server_id)
    authorize(ctx, "os_compute_api:os-server-diagnostics", {"project_id": instance["project_id"]})
    if not instance.get("host"):
        raise exceptions.InstanceNotReady(instance_id=instance["uuid"])
    return await compute_api.compute_rpcapi.get_diagnostics(
        ctx, instance["host"], instance["uuid"], standard=request.state.api_version.matches("2.48"))
