"""``POST /v2.1/servers/{id}/action``: ``addFixedIp`` {networkId} and ``removeFixedIp`` {address}
(Nova's multinic controller; 2.1 to 2.43, 404 from 2.44 as ``server_actions.ACTION_VERSIONS`` says).

As Nova with Neutron: addFixedIp gives the server's port on that network one more fixed IP (from the
first of the network's subnets able to give one), removeFixedIp takes the address off the port
holding it; the port's other addresses stay. The body is validated first, then the server looked up
(404), then the policy checked against its project, then its lock (409). The port is updated through
the Networking API (``nefos.clients.network``); the server's addresses follow with the port's
``network-changed`` event. Unlike Nova, which casts to the compute host and answers 202 whatever
happens there, the work is done before answering: a server without a port on that network (or no
address left) and an address the server does not hold are 400. The guest is not told: it sees the
new address on its next DHCP lease, as with Nova. Both answer 202 with no body."""

from __future__ import annotations

from fastapi import Request

from nefos.control.compute.rest.common import authorized_instance
from nefos.control.compute.rest.validation import IP_ADDRESS, one_action_schema, validate

ADD_SCHEMA = one_action_schema("addFixedIp", {"networkId": {"type": ["string", "number"]}}, ["networkId"])
REMOVE_SCHEMA = one_action_schema("removeFixedIp", {"address": IP_ADDRESS}, ["address"])


async def add_fixed_ip(request: Request, ctx, server_id: str, body: dict) -> None:
    validate(body, ADD_SCHEMA)
    instance = await authorized_instance(request, ctx, server_id, "os_compute_api:os-multinic:add")
    compute_api = request.app.state.compute_api
    compute_api.check_lock(ctx, instance)
    await compute_api.network_api.add_fixed_ip_to_instance(ctx, instance, str(body["addFixedIp"]["networkId"]))


async def remove_fixed_ip(request: Request, ctx, server_id: str, body: dict) -> None:
    validate(body, REMOVE_SCHEMA)
    instance = await authorized_instance(request, ctx, server_id, "os_compute_api:os-multinic:remove")
    compute_api = request.app.state.compute_api
    compute_api.check_lock(ctx, instance)
    await compute_api.network_api.remove_fixed_ip_from_instance(ctx, instance, body["removeFixedIp"]["address"])


HANDLERS = {"addFixedIp": add_fixed_ip, "removeFixedIp": remove_fixed_ip}
