"""``/v2.1/os-floating-ips`` (list, show, allocate, deallocate) and ``/v2.1/os-floating-ip-pools``:
Nova's floating IP proxy APIs over the Networking API's floating IPs, with the caller's context.

As Nova with Neutron, up to 2.35 (404 from 2.36):

* a floating IP shows ``id``, ``ip``, ``fixed_ip``, ``instance_id`` (the device of the port it is
  associated with) and ``pool`` (its external network's name, else id);
* the list is the caller's project's floating IPs (an admin's too: its own project's);
* allocating takes one from the external network named (or with the id) ``pool`` (Nova's default
  pool name is "nova"): 404 when there is no such pool or it has no address left, 403 over quota;
  the answer is 200;
* deallocating disassociates and releases it (202); the server's addresses follow with the port's
  ``network-changed`` event;
* the pools are the external networks the caller can see, by name (id when unnamed).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from nefos import exceptions, rest
from nefos.control.compute.rest import microversion
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import is_uuid_like, validate
from nefos.openapi import documented
from nefos.control.compute.authorization import authorize

router = APIRouter()

DEFAULT_POOL = "nova"  # Nova's [neutron] default_floating_pool
CREATE = {"type": ["object", "null"], "properties": {"pool": {"type": ["string", "null"]}}}


def _network_api(request: Request):
    return request.app.state.compute_api.network_api


def _context(request: Request, action: str):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    ctx = rest.get_context(request)
    authorize(ctx, f"os_compute_api:os-floating-ips:{action}", {"project_id": ctx.project_id})
    return ctx


async def _views(request: Request, ctx, fips: list[dict]) -> list[dict]:
    """Nova's view of each: the pool from its network, the instance from its port (as the caller sees
    them; a network or port the caller cannot see shows the network id and no instance)."""
    if not fips:
        return []
    network_api = _network_api(request)
    nets = {n["id"]: n for n in await network_api.list_networks(
        ctx, {"id": list({f["floating_network_id"] for f in fips})})}
    port_ids = list({f["port_id"] for f in fips if f.get("port_id")})
    ports = {p["id"]: p for p in await network_api.list_ports(ctx, {"id": port_ids},
                                                              ["id", "device_id"])} if port_ids else {}
    views = []
    for fip in fips:
        net = nets.get(fip["floating_network_id"], {})
        port = ports.get(fip.get("port_id") or "")
        views.append({"id": fip["id"], "ip": fip["floating_ip_address"], "fixed_ip": fip["fixed_ip_address"],
                      "instance_id": (port.get("device_id") or None) if port else None,
                      "pool": net.get("name") or fip["floating_network_id"]})
    return views


async def _floating_ip(request: Request, ctx, fip_id: str) -> dict:
    try:
        return await _network_api(request).get_floatingip(ctx, fip_id)
    except exceptions.NotFound:
        raise exceptions.NotFound(f"Floating IP not found for ID {fip_id}") from None


async def _pool_id(request: Request, ctx, pool: str) -> str:
    """The external network named ``pool`` (or with that id), as Nova looks it up."""
    key = "id" if is_uuid_like(pool) else "name"
    nets = await _network_api(request).list_networks(ctx, {"router:external": [True], key: [pool]})
    if not nets:
        raise exceptions.NotFound("Floating IP pool not found.")
    if len(nets) > 1:
        raise exceptions.Conflict(f"Multiple floating IP pools matches found for name '{pool}'")
    return nets[0]["id"]


@router.get("/v2.1/os-floating-ips")
@documented(responses={200: responses.FLOATING_IPS})
async def list_floating_ips(request: Request):
    ctx = _context(request, "list")
    fips = await _network_api(request).list_floatingips(ctx, {"tenant_id": [ctx.project_id]})
    return {"floating_ips": await _views(request, ctx, fips)}


@router.get("/v2.1/os-floating-ips/{fip_id}")
@documented(responses={200: responses.FLOATING_IP})
async def show_floating_ip(request: Request, fip_id: str):
    ctx = _context(request, "show")
    (view,) = await _views(request, ctx, [await _floating_ip(request, ctx, fip_id)])
    return {"floating_ip": view}


@router.post("/v2.1/os-floating-ips")
@documented(request=CREATE, responses={200: responses.FLOATING_IP})
async def allocate_floating_ip(request: Request):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    body = await rest.json_body(request) if await request.body() else None  # no body: the default pool
    validate(body, CREATE)
    ctx = _context(request, "create")
    requested = (body or {}).get("pool")
    pool = requested or DEFAULT_POOL
    network_id = await _pool_id(request, ctx, pool)
    try:
        fip = await _network_api(request).create_floatingip(ctx, {"floating_network_id": network_id})
    except exceptions.IpAddressGenerationFailure:
        raise exceptions.NotFound(f"No more floating IPs in pool {pool}.") from None
    except exceptions.OverQuota:
        raise exceptions.OverQuota(f"IP allocation over quota in pool {pool}.") from None
    (view,) = await _views(request, ctx, [fip])
    return {"floating_ip": view}


@router.delete("/v2.1/os-floating-ips/{fip_id}")
@documented(responses={202: responses.NO_BODY})
async def deallocate_floating_ip(request: Request, fip_id: str):
    ctx = _context(request, "delete")
    fip = await _floating_ip(request, ctx, fip_id)
    try:
        await _network_api(request).delete_floatingip(ctx, fip["id"])
    except exceptions.NotFound:
        raise exceptions.NotFound(f"Floating IP not found for address {fip['floating_ip_address']}.") from None
    return Response(status_code=202)


@router.get("/v2.1/os-floating-ip-pools")
@documented(responses={200: responses.FLOATING_IP_POOLS})
async def list_floating_ip_pools(request: Request):
    microversion.require_at_most(request, microversion.MAX_PROXY_VERSION)
    authorize(rest.get_context(request), "os_compute_api:os-floating-ip-pools", {})
    nets = await _network_api(request).list_networks(rest.get_context(request), {"router:external": [True]})
    return {"floating_ip_pools": [{"name": n["name"] or n["id"]} for n in nets]}
