"""``GET /v2.1/servers/{id}/topology`` (2.78): the server's NUMA topology.

Nefos builds no guest with a NUMA topology (neither driver places vCPUs or memory
on host NUMA nodes, nor pins them), so every server answers as a Nova server
without one does: ``{"nodes": [], "pagesize_kb": null}``. Policies as Nova's:
``compute:server:topology:index`` (the project's readers, admins) and
``compute:server:topology:host:index`` (admins: host NUMA node ids and CPU
pinning, which a server without a topology has none of).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest.validation import refuse_query_from_2102
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


@router.get("/v2.1/servers/{server_id}/topology")
@documented(responses={200: responses.TOPOLOGY})
async def show_topology(request: Request, server_id: str):
    version = request.state.api_version
    if not version.matches("2.78"):
        raise exceptions.NotFound("The resource could not be found.")
    refuse_query_from_2102(request)
    ctx = rest.get_context(request)
    instance = await request.app.state.compute_api.get(ctx, server_id)
    authorize(ctx, "compute:server:topology:index", {"project_id": instance["project_id"]})
    return {"nodes": [], "pagesize_kb": None}
