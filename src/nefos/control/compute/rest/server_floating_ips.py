"""``POST /v2.1/servers/{id}/action``: ``addFloatingIp`` {address, fixed_address?} and
``removeFloatingIp`` {address} (Nova's floating_ips controller; 2.1 to 2.43, 404 from 2.44 as
``server_actions.ACTION_VERSIONS`` says). The body is validated first, then the server looked up
(404), then the policy checked against its project, as Nova; the work is
``nefos.control.compute.floating_ips``. Both answer 202 with no body."""

from __future__ import annotations

from fastapi import Request

from nefos.control.compute.rest.common import authorized_instance
from nefos.control.compute.rest.validation import IP_ADDRESS, one_action_schema, validate
from nefos.control.compute import floating_ips as floating_ips_api

ADD_SCHEMA = one_action_schema("addFloatingIp", {"address": IP_ADDRESS, "fixed_address": IP_ADDRESS}, ["address"])
REMOVE_SCHEMA = one_action_schema("removeFloatingIp", {"address": IP_ADDRESS}, ["address"])


async def add_floating_ip(request: Request, ctx, server_id: str, body: dict) -> None:
    validate(body, ADD_SCHEMA)
    instance = await authorized_instance(request, ctx, server_id, "os_compute_api:os-floating-ips:add")
    args = body["addFloatingIp"]
    await floating_ips_api.add_floating_ip(request.app.state.compute_api.network_api, ctx, instance,
                                           args["address"], args.get("fixed_address"))


async def remove_floating_ip(request: Request, ctx, server_id: str, body: dict) -> None:
    validate(body, REMOVE_SCHEMA)
    instance = await authorized_instance(request, ctx, server_id, "os_compute_api:os-floating-ips:remove")
    await floating_ips_api.remove_floating_ip(request.app.state.compute_api.network_api, ctx, instance,
                                              body["removeFloatingIp"]["address"])


HANDLERS = {"addFloatingIp": add_floating_ip, "removeFloatingIp": remove_floating_ip}
