"""``/v2.1/servers/{id}/ips`` and ``/ips/{network_label}``: a server's addresses by network."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import server_view
from nefos.control.compute.rest.validation import refuse_query_from_2102
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


async def _addresses(request: Request, server_id: str, rule: str) -> dict:
    refuse_query_from_2102(request)
    ctx = rest.get_context(request)
    authorize(ctx, rule)
    instance = await request.app.state.compute_api.get(ctx, server_id)
    return server_view.addresses(instance, extended=False)


@router.get("/v2.1/servers/{server_id}/ips")
@documented(responses={200: responses.SERVER_ADDRESSES})
async def list_ips(request: Request, server_id: str):
    return {"addresses": await _addresses(request, server_id, "os_compute_api:ips:index")}


@router.get("/v2.1/servers/{server_id}/ips/{network_label}")
@documented(responses={200: responses.NETWORK_ADDRESSES})
async def show_ips(request: Request, server_id: str, network_label: str):
    addresses = await _addresses(request, server_id, "os_compute_api:ips:show")
    if network_label not in addresses:
        raise exceptions.NotFound("Instance is not a member of specified network")
    return {network_label: addresses[network_label]}
