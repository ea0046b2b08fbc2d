"""The bus contract, run against every transport (in-process and RabbitMQ).

RabbitMQ must be reachable at ``NEFOS_TEST_AMQP_URL`` (default: guest@127.0.0.1);
``scripts/run-tests.sh`` starts it. Nothing here skips: an unreachable broker fails.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from nefos import exceptions
from nefos.bus import Endpoint, RemoteError, create_bus
from nefos.bus.versioning import NoSuchMethod, RPCInterface
from nefos.context import RequestContext, current_context
from tests.eventually import eventually

AMQP_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


async def _delete_fanout_exchange(topic: str) -> None:
    """Fanout exchanges outlive their servers (by design); the tests remove theirs."""
    import aio_pika

    from nefos.bus.rabbit import fanout_exchange

    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        await channel.exchange_delete(fanout_exchange(topic))
    finally:
        await connection.close()


@pytest.fixture(params=["local", pytest.param("rabbit", marks=pytest.mark.rabbit)])
async def make_bus(request, topic):
    """A factory of started buses: on RabbitMQ each is its own connection (like a
    separate process); in-process there is only the one bus to share."""
    created = []

    async def factory():
        if request.param == "local":
            if not created:
                bus = create_bus("local://")
                await bus.start()
                created.append(bus)
            return created[0]
        bus = create_bus(AMQP_URL)
        await bus.start()
        created.append(bus)
        return bus

    yield factory
    for bus in created:
        await bus.stop()
    if request.param == "rabbit":
        await _delete_fanout_exchange(topic)


@pytest.fixture
def topic():
    """A topic name no other test (or earlier run) uses."""
    return f"test{uuid.uuid4().hex[:10]}"


V = "1.0"  # every message names its interface version (nefos.bus.versioning)
SERVED = ("add", "echo", "whoami", "missing_instance", "crash", "slow", "wait_gate", "open_gate",
          "context", "record", "double")


@pytest.fixture(autouse=True)
def server_interface(topic, monkeypatch):
    """``Server``'s declared interface, on this test's topic."""
    monkeypatch.setattr(Server, "rpc_interface",
                        RPCInterface(topic, version=V, methods={m: V for m in SERVED}), raising=False)


class Server(Endpoint):
    def __init__(self, name: str = "server"):
        self.name = name
        self.received: list = []
        self.gate = asyncio.Event()
        self.at_gate = asyncio.Event()

    async def add(self, ctx, a, b):
        return a + b

    async def echo(self, ctx, **kwargs):
        return kwargs

    async def whoami(self, ctx):
        return self.name

    async def missing_instance(self, ctx, uuid):
        raise exceptions.InstanceNotFound(instance_id=uuid)

    async def crash(self, ctx):
        raise ValueError("not a registered error")

    async def slow(self, ctx, seconds):
        await asyncio.sleep(seconds)
        return "done"

    async def wait_gate(self, ctx):
        self.at_gate.set()
        await self.gate.wait()
        return "released"

    async def open_gate(self, ctx):
        self.gate.set()
        return "opened"

    async def context(self, ctx):
        cur = current_context.get()
        return {"request_id": ctx.request_id, "project_id": ctx.project_id,
                "user_id": ctx.user_id, "roles": ctx.roles,
                "current_request_id": cur.request_id if cur else None}

    async def record(self, ctx, value):
        self.received.append(value)

    async def double(self, ctx, x):
        await asyncio.sleep(0.01)
        return {"x": x, "double": 2 * x, "by": self.name}

    def sync_method(self, ctx):  # not async: not callable remotely
        return "no"

    async def _private(self, ctx):
        return "no"

    async def undeclared(self, ctx):  # a coroutine, but not in the declared interface
        return "no"


def ctx(**kw) -> RequestContext:
    return RequestContext(**kw)


async def test_call_returns_result(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    assert await client.call(ctx(), topic, "add", version=V, a=2, b=3) == 5
    payload = {"s": "x", "n": None, "l": [1, 2.5, True], "d": {"k": "v"}}
    assert await client.call(ctx(), topic, "echo", version=V, **payload) == payload


async def test_a_message_without_a_context_is_refused_and_runs_nothing(make_bus, topic):
    """Every message names whose authority it carries; one without a context acts as nobody: it is
    refused before its method runs, a call with NotAuthorized."""
    server_bus, client = await make_bus(), await make_bus()
    server = Server()
    await server_bus.serve(topic, server, host="h1")
    with pytest.raises(exceptions.NotAuthorized):
        await client.call(None, topic, "record", version=V, value="call without a context")
    await client.cast(None, topic, "record", version=V, value="cast without a context")
    await client.cast(ctx(), topic, "record", version=V, value="cast")
    await eventually(lambda: "cast" in server.received)
    assert await client.call(ctx(), topic, "add", version=V, a=1, b=1) == 2
    assert server.received == ["cast"]


async def test_a_starting_server_queues_casts_and_refuses_calls_until_it_is_ready(make_bus, topic):
    """A service that listens before it starts (a compute host recovering its instances): casts
    wait and run once it is ready; a call is refused at once and never runs (its caller would have
    given up, and been told it failed, before a late run)."""
    server_bus, client = await make_bus(), await make_bus()
    server = Server()
    server.rpc_ready = asyncio.Event()
    await server_bus.serve(topic, server, host="h1")
    await client.cast(ctx(), topic, "record", version=V, host="h1", value="cast while starting")
    started = time.monotonic()
    with pytest.raises(exceptions.NoServerListening):
        await client.call(ctx(), topic, "record", version=V, host="h1", value="call while starting")
    assert time.monotonic() - started < 5  # refused, not timed out
    assert server.received == []
    server.rpc_ready.set()
    await eventually(lambda: server.received == ["cast while starting"])
    assert await client.call(ctx(), topic, "add", version=V, host="h1", a=1, b=2) == 3
    assert server.received == ["cast while starting"]


async def test_a_control_plane_service_answers_a_call_delivered_while_it_subscribes(topic):
    """A service that listens as the last step of its start (conductor, scheduler) serves a call
    the broker delivers before the subscription is confirmed: on a shared topic, refusing it
    would fail the caller (a compute host starting) where the other server could have answered."""
    from types import SimpleNamespace

    from nefos.bus.base import dispatch, make_message
    from nefos.config import Config
    from nefos.service import Service

    answers = []

    class SubscribingBus:
        async def serve(self, topic_, endpoint, host=None):
            # The broker delivers a call before it confirms the subscription (aiormq runs it
            # while ``serve`` still awaits the consume-ok).
            answers.append(await dispatch(endpoint, make_message(ctx(), "add", {"a": 1, "b": 2}, V), answered=True))

        async def unserve(self, endpoint):
            pass

    class Registered:
        async def register(self, *args):
            return 1

    service = Service(SimpleNamespace(bus=SubscribingBus(), cfg=Config()), "nova-conductor", topic, "h1",
                      endpoint=Server(), group=Registered())
    await service.start()
    try:
        assert answers == [3]
    finally:
        await service.stop()


async def test_call_to_host_specific_server(make_bus, topic):
    a, b, client = await make_bus(), await make_bus(), await make_bus()
    await a.serve(topic, Server("a"), host="host-a")
    await b.serve(topic, Server("b"), host="host-b")
    for _ in range(6):
        assert await client.call(ctx(), topic, "whoami", version=V, host="host-b") == "b"
        assert await client.call(ctx(), topic, "whoami", version=V, host="host-a") == "a"


async def test_remote_typed_error_keeps_class_and_message(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    with pytest.raises(exceptions.InstanceNotFound) as info:
        await client.call(ctx(), topic, "missing_instance", version=V, uuid="abc-123")
    assert str(info.value) == "Instance abc-123 could not be found."
    assert info.value.code == 404
    assert info.value.kwargs == {"instance_id": "abc-123"}
    assert "missing_instance" in info.value.remote_traceback


async def test_unregistered_error_becomes_remote_error(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    with pytest.raises(RemoteError) as info:
        await client.call(ctx(), topic, "crash", version=V)
    assert "ValueError" in str(info.value)
    assert "not a registered error" in str(info.value)


@pytest.mark.parametrize("method", ["no_such_method", "_private", "sync_method", "undeclared"])
async def test_unknown_method_error(make_bus, topic, method):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    with pytest.raises(NoSuchMethod) as info:
        await client.call(ctx(), topic, method, version=V)
    assert method in str(info.value)
    # The server keeps serving afterwards.
    assert await client.call(ctx(), topic, "add", version=V, a=1, b=2) == 3


async def test_timeout_raises_service_unavailable(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    start = time.monotonic()
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.call(ctx(), topic, "slow", version=V, seconds=30, timeout=0.5)
    assert time.monotonic() - start < 5
    # A late reply to a timed-out call does not disturb the next call.
    assert await client.call(ctx(), topic, "add", version=V, a=4, b=4, timeout=5) == 8


async def test_default_timeout_applies(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    client.default_timeout = 0.5
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.call(ctx(), topic, "slow", version=V, seconds=30)


async def test_no_server_raises_service_unavailable(make_bus, topic):
    client = await make_bus()
    start = time.monotonic()
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.call(ctx(), topic, "add", version=V, a=1, b=2, timeout=30)
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.cast(ctx(), topic, "record", version=V, value=1)
    # A topic served, but not on the asked host.
    server_bus = await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.call(ctx(), topic, "add", version=V, a=1, b=2, host="other-host", timeout=30)
    # None of these waited for the timeout.
    assert time.monotonic() - start < 10


async def test_cast_is_delivered(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    server = Server()
    await server_bus.serve(topic, server, host="h1")
    assert await client.cast(ctx(), topic, "record", version=V, value="one") is None
    await client.cast(ctx(), topic, "record", version=V, host="h1", value="two")
    await eventually(lambda: sorted(server.received) == ["one", "two"])


async def test_cast_failure_does_not_reach_caller(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    server = Server()
    await server_bus.serve(topic, server, host="h1")
    assert await client.cast(ctx(), topic, "crash", version=V) is None
    assert await client.cast(ctx(), topic, "no_such_method", version=V) is None
    await client.cast(ctx(), topic, "record", version=V, value="after")
    await eventually(lambda: server.received == ["after"])  # the server serves on


async def test_fanout_reaches_every_server(make_bus, topic):
    servers = [Server(f"s{i}") for i in range(3)]
    for i, server in enumerate(servers):
        await (await make_bus()).serve(topic, server, host=f"host-{i}")
    client = await make_bus()
    await client.fanout(ctx(), topic, "record", version=V, value="hello")
    await client.fanout(ctx(), topic, "record", version=V, value="later")
    # Each server gets a topic's fanouts in order: once "later" arrived, every copy of "hello"
    # that was going to arrive has.
    await eventually(lambda: all("later" in s.received for s in servers))
    assert [s.received for s in servers] == [["hello", "later"]] * 3  # exactly once each


async def test_fanout_without_servers_is_a_no_op(make_bus, topic):
    """Nothing waits for a server and nothing is kept for one: a server that comes later gets
    only the fanouts sent after it."""
    client = await make_bus()
    start = time.monotonic()
    assert await client.fanout(ctx(), topic, "record", version=V, value="nobody") is None
    assert time.monotonic() - start < 5
    server = Server()
    await (await make_bus()).serve(topic, server, host="h1")
    await client.fanout(ctx(), topic, "record", version=V, value="after")
    await eventually(lambda: "after" in server.received)
    assert server.received == ["after"]


async def test_round_robin_over_servers_of_a_topic(make_bus, topic):
    a, b = Server("a"), Server("b")
    await (await make_bus()).serve(topic, a, host="host-a")
    await (await make_bus()).serve(topic, b, host="host-b")
    client = await make_bus()
    seen = [await client.call(ctx(), topic, "whoami", version=V) for _ in range(20)]
    assert seen.count("a") >= 5 and seen.count("b") >= 5, seen
    for i in range(20):
        await client.cast(ctx(), topic, "record", version=V, value=i)
    await eventually(lambda: len(a.received) + len(b.received) == 20)
    assert a.received and b.received
    assert sorted(a.received + b.received) == list(range(20))


async def test_notifications_received(make_bus, topic):
    listener_bus, publisher = await make_bus(), await make_bus()
    got: list[dict] = []

    async def on_notification(message):
        if message["event_type"].startswith(topic):
            got.append(message)

    await listener_bus.listen_notifications(on_notification)
    c = ctx()
    await publisher.notify(c, f"{topic}.instance.create.end", versioned(uuid="u1", n=1),
                           publisher_id="compute.host1")
    await publisher.notify(c, f"{topic}.instance.create.error", versioned(uuid="u1"),
                           publisher_id="compute.host1", priority="error")
    await eventually(lambda: len(got) == 2)
    by_type = {m["event_type"]: m for m in got}
    end = by_type[f"{topic}.instance.create.end"]
    assert end["payload"] == versioned(uuid="u1", n=1)
    assert end["request_id"] == c.request_id
    assert end["publisher_id"] == "compute.host1"
    assert end["priority"] == "INFO"
    assert end["message_id"] and end["timestamp"]
    assert by_type[f"{topic}.instance.create.error"]["priority"] == "ERROR"


def versioned(**data) -> dict:
    """A notification payload: every one names its version (Nova's versioned notifications)."""
    return {"nova_object.name": "TestPayload", "nova_object.version": "1.0", "nova_object.data": data}


async def test_a_notification_payload_without_a_version_is_not_sent(make_bus, topic):
    publisher = await make_bus()
    with pytest.raises(ValueError, match="nova_object.version"):
        await publisher.notify(None, f"{topic}.x", {"i": 1}, publisher_id="test")


def payload_collector(bucket: list, topic: str):
    """A notification listener that keeps the payloads of this test's (``topic``) notifications."""
    async def cb(message):
        if message["event_type"].startswith(topic):
            bucket.append(message["payload"])
    return cb


async def test_every_notification_listener_gets_each_notification(make_bus, topic):
    got_a, got_b = [], []
    await (await make_bus()).listen_notifications(payload_collector(got_a, topic))
    await (await make_bus()).listen_notifications(payload_collector(got_b, topic))
    publisher = await make_bus()
    await publisher.notify(None, f"{topic}.x", versioned(i=1), publisher_id="test")
    await eventually(lambda: got_a == [versioned(i=1)] and got_b == [versioned(i=1)])


async def test_context_is_carried_to_the_handler(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    c = RequestContext(project_id="p-1", user_id="u-1", roles=["member"], is_admin=False)
    got = await client.call(c, topic, "context", version=V)
    assert got == {"request_id": c.request_id, "project_id": "p-1", "user_id": "u-1",
                   "roles": ["member"], "current_request_id": c.request_id}


async def test_200_concurrent_calls(make_bus, topic):
    await (await make_bus()).serve(topic, Server("a"), host="host-a")
    await (await make_bus()).serve(topic, Server("b"), host="host-b")
    client = await make_bus()
    results = await asyncio.gather(*[
        client.call(ctx(), topic, "double", version=V, x=i, timeout=60) for i in range(200)])
    assert [r["double"] for r in results] == [2 * i for i in range(200)]
    assert {r["by"] for r in results} == {"a", "b"}


async def test_slow_handler_does_not_block_others(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    server = Server()
    await server_bus.serve(topic, server, host="h1")
    waiting = asyncio.ensure_future(client.call(ctx(), topic, "wait_gate", version=V, timeout=30))
    await asyncio.wait_for(server.at_gate.wait(), 10)  # the first handler runs, and waits
    assert not waiting.done()
    # Other calls (on the shared and the host queue) run while the first handler waits.
    assert await client.call(ctx(), topic, "add", version=V, a=1, b=1, timeout=5) == 2
    assert await client.call(ctx(), topic, "open_gate", version=V, host="h1", timeout=5) == "opened"
    assert await asyncio.wait_for(waiting, 5) == "released"


async def test_arguments_must_be_json(make_bus, topic):
    server_bus, client = await make_bus(), await make_bus()
    await server_bus.serve(topic, Server(), host="h1")
    with pytest.raises(TypeError):
        await client.call(ctx(), topic, "echo", version=V, value=object())


async def _rabbitmqctl(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def _close_connections_of(*buses) -> None:
    """Have the broker drop these buses' connections (each reconnects by itself)."""
    names = {bus.connection_name for bus in buses}
    listing = await _rabbitmqctl("list_connections", "-q", "--no-table-headers", "pid", "client_properties")
    pids = [line.split("\t")[0] for line in listing.splitlines() if any(name in line for name in names)]
    assert len(pids) == len(buses), listing
    for pid in pids:
        await _rabbitmqctl("close_connection", pid, "nefos test: simulated failure")


async def _add_once_reconnected(client, topic) -> None:
    """A call answered once the buses are back (the client may be back before the server has
    re-declared its queues)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            assert await client.call(ctx(), topic, "add", version=V, a=2, b=2, timeout=5) == 4
            return
        except exceptions.ServiceUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


@pytest.mark.rabbit
async def test_rabbit_recovers_after_connection_loss(topic):
    """The broker drops both connections; the buses reconnect and restore their queues."""
    from nefos.bus.rabbit import RabbitBus

    server_bus, client = RabbitBus(AMQP_URL), RabbitBus(AMQP_URL)
    await server_bus.start()
    await client.start()
    try:
        server = Server()
        await server_bus.serve(topic, server, host="h1")
        assert await client.call(ctx(), topic, "add", version=V, a=1, b=1) == 2

        await _close_connections_of(server_bus, client)
        await _add_once_reconnected(client, topic)
        assert await client.call(ctx(), topic, "whoami", version=V, host="h1", timeout=10) == "server"
        await client.fanout(ctx(), topic, "record", version=V, value="after-reconnect")
        await eventually(lambda: server.received == ["after-reconnect"])
    finally:
        await client.stop()
        await server_bus.stop()
        await _delete_fanout_exchange(topic)


@pytest.mark.rabbit
async def test_a_call_whose_connection_is_lost_fails_at_once(topic):
    """The caller's connection to the broker drops while its call waits for the answer: the answer
    can no longer come (the reply queue went with the connection), so the call fails then with
    ServiceUnavailable, not at the end of its timeout; the bus serves calls again once reconnected."""
    from nefos.bus.rabbit import RabbitBus

    server_bus, client = RabbitBus(AMQP_URL), RabbitBus(AMQP_URL)
    await server_bus.start()
    await client.start()
    server = Server()
    try:
        await server_bus.serve(topic, server)
        waiting = asyncio.create_task(client.call(ctx(), topic, "wait_gate", version=V, timeout=60))
        await eventually(lambda: len(server_bus._tasks) >= 1)  # the server holds the call at its gate
        started = time.monotonic()
        await _close_connections_of(client)
        with pytest.raises(exceptions.ServiceUnavailable, match="connection to the message bus was lost"):
            await asyncio.wait_for(waiting, 50)
        assert time.monotonic() - started < 30, "the call waited for its timeout"
        server.gate.set()
        await _add_once_reconnected(client, topic)
    finally:
        server.gate.set()
        await client.stop()
        await server_bus.stop()
        await _delete_fanout_exchange(topic)


@pytest.mark.rabbit
async def test_rabbit_consumers_registered_by_aio_pika_still_serve(topic):
    """The bus's consumers take aiormq's deliveries; aio-pika re-registers a consumer the broker
    cancelled through its own Queue.consume, which delivers aio-pika messages instead: requests
    and replies still get through."""
    import aio_pika

    from nefos.bus.rabbit import RabbitBus

    server_bus, client = RabbitBus(AMQP_URL), RabbitBus(AMQP_URL)
    await server_bus.start()
    await client.start()
    try:
        server = Server()
        await server_bus.serve(topic, server)
        for queue, tag in [*server_bus._consumers, *client._consumers]:
            # The new consumer first: a queue goes with its last consumer (auto-delete).
            await aio_pika.Queue.consume(queue, **queue._consumers[tag])
            await (await queue.channel.get_underlay_channel()).basic_cancel(tag)
        assert await client.call(ctx(), topic, "add", version=V, a=2, b=3) == 5
        await client.cast(ctx(), topic, "record", version=V, value="cast")
        await eventually(lambda: server.received == ["cast"])
    finally:
        await client.stop()
        await server_bus.stop()
        await _delete_fanout_exchange(topic)


async def test_rabbit_unreachable_broker_is_service_unavailable():
    from nefos.bus.rabbit import RabbitBus

    bus = RabbitBus("amqp://guest:secret@127.0.0.1:1/")
    with pytest.raises(exceptions.ServiceUnavailable) as info:
        await bus.start()
    assert "secret" not in str(info.value)
    await bus.stop()


async def test_unserve_stops_delivery(make_bus, topic):
    a, b = Server("a"), Server("b")
    bus_a = await make_bus()
    await bus_a.serve(topic, a, host="host-a")
    await (await make_bus()).serve(topic, b, host="host-b")
    client = await make_bus()
    await bus_a.unserve(a)
    seen = [await client.call(ctx(), topic, "whoami", version=V) for _ in range(10)]
    assert seen == ["b"] * 10
    with pytest.raises(exceptions.ServiceUnavailable):
        await client.call(ctx(), topic, "whoami", version=V, host="host-a", timeout=2)


@pytest.mark.rabbit
async def test_rabbit_clouds_on_one_broker_are_apart(topic):
    """Two clouds on one broker (each its control exchange) never see each other's calls or
    notifications; two processes of one cloud do."""
    exchanges = [f"cloud-a-{topic}", f"cloud-b-{topic}"]
    a1, a2, b = (create_bus(AMQP_URL, control_exchange=exchanges[0]),
                 create_bus(AMQP_URL, control_exchange=exchanges[0]),
                 create_bus(AMQP_URL, control_exchange=exchanges[1]))
    for bus in (a1, a2, b):
        await bus.start()
    try:
        await a1.serve(topic, Server())
        assert await a2.call(ctx(), topic, "add", version=V, a=1, b=2) == 3
        with pytest.raises(exceptions.ServiceUnavailable):
            await b.call(ctx(), topic, "add", version=V, a=1, b=2, timeout=2)
        seen_a, seen_b = [], []
        await a1.listen_notifications(payload_collector(seen_a, topic))
        await b.listen_notifications(payload_collector(seen_b, topic))
        await a2.notify(None, f"{topic}.x", versioned(cloud="a"), publisher_id="test")
        await b.notify(None, f"{topic}.x", versioned(cloud="b"), publisher_id="test")
        await eventually(lambda: seen_a == [versioned(cloud="a")] and seen_b == [versioned(cloud="b")])
        # A later notification of each cloud: once each listener has its own, the other cloud's
        # first one (published before it) would have arrived too.
        await a2.notify(None, f"{topic}.x", versioned(cloud="a", later=True), publisher_id="test")
        await b.notify(None, f"{topic}.x", versioned(cloud="b", later=True), publisher_id="test")
        await eventually(lambda: versioned(cloud="a", later=True) in seen_a
                         and versioned(cloud="b", later=True) in seen_b)
        assert seen_a == [versioned(cloud="a"), versioned(cloud="a", later=True)]
        assert seen_b == [versioned(cloud="b"), versioned(cloud="b", later=True)]
    finally:
        for bus in (a1, a2, b):
            await bus.stop()
        import aio_pika
        connection = await aio_pika.connect(AMQP_URL)
        try:
            channel = await connection.channel()
            for exchange in exchanges:
                await channel.exchange_delete(f"{exchange}.nefos_notifications")
                await channel.exchange_delete(f"{exchange}.{topic}_fanout")
        finally:
            await connection.close()
