"""APIs Nova removed (nova-network, cells v1, cloudpipe, certificates, the XenAPI agents, the
XVP consoles): Nova still routes them and answers 410 Gone at every microversion, without a
policy check (its ``removed`` controllers). The proxy APIs Nova still serves below 2.36 are not
here."""

from __future__ import annotations

from fastapi import APIRouter, Request

from nefos import exceptions, rest
from nefos.control.compute.rest.server_actions import no_such_action, single_action
from nefos.openapi import documented

router = APIRouter()

# (path, methods), as Nova's routes.py keeps them.
REMOVED_ROUTES = (
    ("/v2.1/os-agents", ("GET", "POST")),
    ("/v2.1/os-agents/{id}", ("PUT", "DELETE")),
    ("/v2.1/os-cells", ("GET", "POST")),
    ("/v2.1/os-cells/capacities", ("GET",)),
    ("/v2.1/os-cells/detail", ("GET",)),
    ("/v2.1/os-cells/info", ("GET",)),
    ("/v2.1/os-cells/sync_instances", ("POST",)),
    ("/v2.1/os-cells/{id}", ("GET", "PUT", "DELETE")),
    ("/v2.1/os-cells/{id}/capacities", ("GET",)),
    ("/v2.1/os-certificates", ("POST",)),
    ("/v2.1/os-certificates/{id}", ("GET",)),
    ("/v2.1/os-cloudpipe", ("GET", "POST")),
    ("/v2.1/os-cloudpipe/{id}", ("PUT",)),
    ("/v2.1/os-fixed-ips/{id}", ("GET",)),
    ("/v2.1/os-floating-ip-dns", ("GET",)),
    ("/v2.1/os-floating-ip-dns/{id}", ("PUT", "DELETE")),
    ("/v2.1/os-floating-ip-dns/{domain_id}/entries/{id}", ("GET", "PUT", "DELETE")),
    ("/v2.1/os-floating-ips-bulk", ("GET", "POST")),
    ("/v2.1/os-floating-ips-bulk/{id}", ("GET", "PUT")),
    ("/v2.1/os-fping", ("GET",)),
    ("/v2.1/os-fping/{id}", ("GET",)),
    ("/v2.1/os-networks", ("POST",)),
    ("/v2.1/os-networks/add", ("POST",)),
    ("/v2.1/os-networks/{id}", ("DELETE",)),
    ("/v2.1/os-security-group-default-rules", ("GET", "POST")),
    ("/v2.1/os-security-group-default-rules/{id}", ("GET", "DELETE")),
    ("/v2.1/os-tenant-networks", ("POST",)),
    ("/v2.1/os-tenant-networks/{id}", ("DELETE",)),
    ("/v2.1/servers/{server_id}/consoles", ("GET", "POST")),
    ("/v2.1/servers/{server_id}/consoles/{id}", ("GET", "DELETE")),
    ("/v2.1/servers/{server_id}/os-virtual-interfaces", ("GET",)),
)


@documented(responses={})  # never a success: 410 Gone
async def gone():
    raise exceptions.Gone()


# The nova-network actions of os-networks (its own and the associate controller's).
_NETWORK_ACTIONS = ("disassociate", "disassociate_host", "disassociate_project", "associate_host")


@router.post("/v2.1/os-networks/{id}/action", include_in_schema=False)
@documented(responses={})
async def network_action(request: Request, id: str):
    name, _args = single_action(await rest.json_body(request))
    if name not in _NETWORK_ACTIONS:
        raise no_such_action(name)
    raise exceptions.Gone()


for _path, _methods in REMOVED_ROUTES:
    router.add_api_route(_path, gone, methods=list(_methods), include_in_schema=False)


@router.post("/v2.1/os-fixed-ips/{id}/action", include_in_schema=False)
@documented(responses={})
async def fixed_ip_action(request: Request, id: str):
    """Nova dispatches the action before its removed handler: only reserve/unreserve are Gone."""
    name, _args = single_action(await rest.json_body(request))
    if name not in ("reserve", "unreserve"):
        raise no_such_action(name)
    raise exceptions.Gone()
