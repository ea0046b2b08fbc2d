"""A bus message acts with the authority its sender's context names, never more: a message without a
context is refused before anything runs (it never acts as an admin), and a context missing the
fields that carry privileges (``is_admin``, ``roles``) has none. The services' own work that is no
one's request (a compute host's start-up and periodic calls to the conductor) sends an admin context
built on purpose.

The attacks go to the network service, whose every operation depends on its caller's authority."""

from __future__ import annotations

import pytest

from nefos import exceptions
from nefos.bus import interfaces
from nefos.bus.base import dispatch
from nefos.bus.versioning import RPCClient
from nefos.clients.conductor import ConductorAPI
from nefos.context import RequestContext, admin_context, current_context
from tests.network.conftest import OTHER, PROJECT, member_ctx
from tests.network.test_client import make_net


@pytest.fixture
async def others_port(manager) -> dict:
    """A port of another project, on its own network: only an admin sees it."""
    net = await make_net(manager, "theirs", "10.9.0.0/24", ctx=member_ctx(OTHER))
    return await manager.create_port(member_ctx(OTHER), {"network_id": net["id"]})


async def test_a_message_without_a_context_cannot_do_an_admins_work(rt, manager, others_port):
    network = RPCClient(rt.bus, interfaces.NETWORK)
    with pytest.raises(exceptions.NotAuthorized):
        await network.call(None, "list_ports")  # an admin's answer would hold every project's ports
    with pytest.raises(exceptions.NotAuthorized):
        await network.call(None, "create_network", network={"name": "ext", "router:external": True,
                                                            "shared": True})
    with pytest.raises(exceptions.NotAuthorized):
        await network.call(None, "delete_port", port_id=others_port["id"])
    networks = await manager.list_networks(admin_context())
    assert [n["name"] for n in networks] == ["theirs"]
    assert await manager.get_port(admin_context(), others_port["id"])
    # the same messages with a member's context: the member's authority, as always
    assert await network.call(member_ctx(PROJECT), "list_ports") == []
    with pytest.raises(exceptions.NotAuthorized):
        await network.call(member_ctx(PROJECT), "create_network", network={"name": "ext", "router:external": True})


async def test_a_context_without_its_privileges_fields_has_none(manager, others_port):
    """A context sent without ``is_admin`` and ``roles`` (no sender of this tree sends one) is a
    caller of its project and nothing more."""
    message = {"method": "list_ports", "version": "1.0", "args": {}, "context": {"project_id": PROJECT}}
    assert await dispatch(manager, message, answered=True) == []
    for context in ({}, None, "admin"):
        with pytest.raises(exceptions.NotAuthorized):
            await dispatch(manager, {**message, "context": context}, answered=True)
    message = {"method": "delete_port", "version": "1.0", "args": {"port_id": others_port["id"]},
               "context": {"project_id": OTHER, "user_id": "u" * 32}}
    assert await dispatch(manager, message, answered=True) is None  # its own port: a member may
    with pytest.raises(exceptions.PortNotFound):
        await manager.get_port(admin_context(), others_port["id"])


class _RecordingBus:
    """Records the context of each call a client sends (and answers nothing)."""

    def __init__(self):
        self.sent: list[tuple[str, RequestContext | None]] = []

    async def call(self, ctx, topic, method, **kwargs):
        self.sent.append((method, ctx))


async def test_a_compute_hosts_own_calls_to_the_conductor_carry_a_service_context():
    bus = _RecordingBus()
    conductor = ConductorAPI(bus)
    await conductor.wait_until_ready()
    await conductor.service_heartbeat(None, 1)  # start-up and periodic work: no one's request
    member = member_ctx(PROJECT)
    token = current_context.set(member)  # within a request: the request's context, as before
    try:
        await conductor.instance_get(None, "i" * 32)
    finally:
        current_context.reset(token)
    (ready, ready_ctx), (heartbeat, heartbeat_ctx), (get, get_ctx) = bus.sent
    assert (ready, heartbeat, get) == ("ready", "service_heartbeat", "instance_get")
    for service in (ready_ctx, heartbeat_ctx):
        assert service.is_admin and service.roles == ["admin"] and service.project_id is None
    assert get_ctx is member
