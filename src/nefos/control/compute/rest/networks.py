"""``/v2.1/os-networks`` and ``/v2.1/os-tenant-networks`` (list, show): Nova's network proxy APIs
over the Networking API, with the caller's context (what it lists is what the Networking API shows
the caller: its project's networks, the shared and the external ones; all of them to an admin).

As Nova with Neutron: up to 2.35 (404 from 2.36); os-networks shows ``id`` and ``label`` (the
name) and null for every nova-network field (admins see the admin-only ones too, null as well);
os-tenant-networks shows ``id``, ``label`` and the string ``"None"`` as ``cidr``. A network the
caller cannot see is 404 "Network not found". Nova's nova-network operations (create, add, delete,
the association actions) answer 410 Gone (``nefos.control.compute.rest.removed``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()


def network_view(ctx, network: dict) -> dict:
    fields = responses.NETWORK_FIELDS + (responses.NETWORK_ADMIN_FIELDS if ctx.is_admin else ())
    view = dict.fromkeys(fields)
    view.update(id=network["id"], label=network["name"])
    return view


def tenant_network_view(network: dict) -> dict:
    # Nova has shown the string "None" as the cidr since it proxied Neutron, and keeps it.
    return {"id": network["id"], "cidr": "None", "label": network["name"]}


def _context(request: Request, rule: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    ctx = rest.get_context(request)
    authorize(ctx, rule, {"project_id": ctx.project_id})
    return ctx


async def _networks(request: Request, ctx) -> list[dict]:
    return await request.app.state.compute_api.network_api.list_networks(ctx)


async def _network(request: Request, ctx, network_id: str) -> dict:
    try:
        return await request.app.state.compute_api.network_api.get_network(ctx, network_id)
    except exceptions.NetworkNotFound:
        raise exceptions.NotFound("Network not found") from None


@router.get("/v2.1/os-networks")
@documented(responses={200: responses.NETWORKS})
async def list_networks(request: Request):
    ctx = _context(request, "os_compute_api:os-networks:list")
    return {"networks": [network_view(ctx, n) for n in await _networks(request, ctx)]}


@router.get("/v2.1/os-networks/{network_id}")
@documented(responses={200: responses.NETWORK})
async def show_network(request: Request, network_id: str):
    ctx = _context(request, "os_compute_api:os-networks:show")
    return {"network": network_view(ctx, await _network(request, ctx, network_id))}


@router.get("/v2.1/os-tenant-networks")
@documented(responses={200: responses.TENANT_NETWORKS})
async def list_tenant_networks(request: Request):
    ctx = _context(request, "os_compute_api:os-tenant-networks:list")
    return {"networks": [tenant_network_view(n) for n in await _networks(request, ctx)]}


@router.get("/v2.1/os-tenant-networks/{network_id}")
@documented(responses={200: responses.TENANT_NETWORK})
async def show_tenant_network(request: Request, network_id: str):
    ctx = _context(request, "os_compute_api:os-tenant-networks:show")
    return {"network": tenant_network_view(await _network(request, ctx, network_id))}
