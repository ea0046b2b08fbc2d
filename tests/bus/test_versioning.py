"""Versioned RPC (``nefos.bus.versioning``, Nova's RPC version pins): what a pinned client sends,
what a server refuses, and where the pins come from ([upgrade_levels], the services rows)."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest

from nefos.bus import Endpoint, create_bus, interfaces
from nefos.bus import local as local_bus
from nefos.bus.base import dispatch
from nefos.bus.versioning import (
    NoSuchMethod, RPCClient, RPCInterface, UnsupportedVersion, VersionCaps, minimum_service_version,
)
from nefos.config import ConfigError, load_config
from nefos.context import RequestContext

AMQP_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

# One interface as two releases declare it: 1.1 added the argument ``shout`` to ``greet`` and the
# method ``wave``.
GREETER_10 = dict(version="1.0", methods={"greet": "1.0"})
GREETER_11 = dict(version="1.1", methods={"greet": "1.0", "wave": "1.1"}, args={"greet": {"shout": "1.1"}})


class Greeter(Endpoint):
    def __init__(self, interface: RPCInterface):
        self.rpc_interface = interface
        self.ran: list[tuple] = []

    async def greet(self, ctx, name: str, shout: bool = False) -> str:
        self.ran.append(("greet", name, shout))
        return f"HELLO {name.upper()}" if shout else f"hello {name}"

    async def wave(self, ctx) -> str:
        self.ran.append(("wave",))
        return "~"

    async def secret(self, ctx) -> str:  # a coroutine, but declared by no version
        self.ran.append(("secret",))
        return "ran"


@pytest.fixture
def topic():
    return f"greeter{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["local", pytest.param("rabbit", marks=pytest.mark.rabbit)])
async def buses(request, topic):
    """(server's bus, client's bus): one in-process bus, or two RabbitMQ connections."""
    if request.param == "local":
        bus = create_bus("local://")
        await bus.start()
        yield bus, bus
        await bus.stop()
        return
    exchange = f"nefos-test-{uuid.uuid4().hex[:8]}"
    server, client = create_bus(AMQP_URL, exchange), create_bus(AMQP_URL, exchange)
    await server.start()
    await client.start()
    yield server, client
    await client.stop()
    await server.stop()
    import aio_pika
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        await channel.exchange_delete(f"{exchange}.{topic}_fanout")
        await channel.exchange_delete(f"{exchange}.nefos_notifications")
    finally:
        await connection.close()


@pytest.fixture
def wire(monkeypatch):
    """Every message the in-process bus's servers received, as it crossed the bus."""
    seen: list[dict] = []

    async def recording(endpoint, message, **kwargs):
        seen.append(message)
        return await dispatch(endpoint, message, **kwargs)

    monkeypatch.setattr(local_bus, "dispatch", recording)
    return seen


def ctx() -> RequestContext:
    return RequestContext(project_id="p", user_id="u")


async def test_a_client_pinned_to_1_0_sends_the_1_0_form_to_a_1_1_server(buses, topic, wire):
    server_bus, client_bus = buses
    server = Greeter(RPCInterface(topic, **GREETER_11))
    await server_bus.serve(topic, server, host="h1")
    client = RPCClient(client_bus, RPCInterface(topic, **GREETER_11))

    client_bus.version_caps = VersionCaps({topic: "1.0"})
    assert await client.can_send_version("1.0") and not await client.can_send_version("1.1")
    assert await client.call(ctx(), "greet", host="h1", name="ann", shout=True) == "hello ann"
    assert server.ran == [("greet", "ann", False)]  # the argument added in 1.1 was left out
    if wire:  # (the in-process bus: the very message)
        assert (wire[-1]["version"], wire[-1]["args"]) == ("1.0", {"name": "ann"})
    with pytest.raises(UnsupportedVersion):  # a method added in 1.1: not sent at all
        await client.call(ctx(), "wave", host="h1")
    assert server.ran == [("greet", "ann", False)]

    client_bus.version_caps = VersionCaps()  # no pin: the current form
    assert await client.call(ctx(), "greet", host="h1", name="ann", shout=True) == "HELLO ANN"
    if wire:
        assert (wire[-1]["version"], wire[-1]["args"]) == ("1.1", {"name": "ann", "shout": True})
    assert await client.call(ctx(), "wave", host="h1") == "~"


async def test_a_1_0_server_refuses_a_future_minor_and_runs_the_1_0_form(buses, topic):
    server_bus, client_bus = buses
    server = Greeter(RPCInterface(topic, **GREETER_10))
    await server_bus.serve(topic, server)
    client = RPCClient(client_bus, RPCInterface(topic, **GREETER_11))
    with pytest.raises(UnsupportedVersion, match="1.1"):
        await client.call(ctx(), "greet", name="bob", shout=True)
    assert server.ran == []
    client_bus.version_caps = VersionCaps({topic: "1.0"})  # the operator's pin during the upgrade
    assert await client.call(ctx(), "greet", name="bob", shout=True) == "hello bob"
    assert server.ran == [("greet", "bob", False)]


@pytest.mark.parametrize("version", ["2.0", "0.9", "2.1", "one", ""])
async def test_another_major_version_is_refused(buses, topic, version):
    server_bus, client_bus = buses
    server = Greeter(RPCInterface(topic, **GREETER_11))
    await server_bus.serve(topic, server)
    if version == "":  # no version at all: 1.0 (a sender from before versioning); runs
        old_message = {"method": "greet", "args": {"name": "old"}, "context": ctx().to_dict()}
        assert await dispatch(server, old_message) == "hello old"
        return
    with pytest.raises(UnsupportedVersion):
        await client_bus.call(ctx(), topic, "greet", version=version, name="x")
    assert server.ran == []


async def test_an_undeclared_method_is_refused_not_run(buses, topic):
    server_bus, client_bus = buses
    server = Greeter(RPCInterface(topic, **GREETER_11))
    await server_bus.serve(topic, server)
    for method in ("secret", "__init__", "rpc_interface", "nothing"):
        with pytest.raises(NoSuchMethod):
            await client_bus.call(ctx(), topic, method, version="1.0")
    with pytest.raises(UnsupportedVersion):  # a method newer than the version it was sent as
        await client_bus.call(ctx(), topic, "wave", version="1.0")
    assert server.ran == []
    with pytest.raises(NoSuchMethod):  # the client refuses it before sending
        await RPCClient(client_bus, server.rpc_interface).call(ctx(), "secret")
    assert await client_bus.call(ctx(), topic, "greet", version="1.1", name="z") == "hello z"


async def test_an_endpoint_is_served_only_on_its_own_declared_interface(topic):
    bus = create_bus("local://")
    await bus.start()
    try:
        with pytest.raises(TypeError, match="declares no RPC interface"):
            await bus.serve("elsewhere", Greeter(RPCInterface(topic, **GREETER_10)))
        with pytest.raises(TypeError, match="no coroutine missing"):
            await bus.serve(topic, Greeter(RPCInterface(topic, version="1.0", methods={"missing": "1.0"})))
        with pytest.raises(ValueError, match="carries its interface version"):
            await bus.cast(ctx(), topic, "greet", name="unversioned")
    finally:
        await bus.stop()


def test_a_declaration_cannot_be_newer_than_its_interface():
    with pytest.raises(ValueError):
        RPCInterface("t", version="1.0", methods={"m": "1.1"})
    with pytest.raises(ValueError):
        RPCInterface("t", version="1.2", methods={"m": "1.0"}, args={"m": {"a": "1.3"}})
    with pytest.raises(ValueError):
        RPCInterface("t", version="1.2", methods={"m": "1.1"}, args={"m": {"a": "1.1"}})


# Every served endpoint declares its interface ------------------------------------------------

def _served_endpoints():
    from nefos.host.compute.manager import ComputeManager
    from nefos.control.conductor.manager import ConductorManager
    from nefos.control.network.agent_rpc import AgentStateCallbacks, L2AgentCallbacks, MetadataCallbacks
    from nefos.clients.network_agents import DhcpAgentEndpoint, L2AgentEndpoint, L3AgentEndpoint
    from nefos.control.network.dhcp_rpc import DhcpCallbacks
    from nefos.control.network.l3_rpc import L3PluginEndpoint
    from nefos.control.network.manager import NetworkManager
    from nefos.control.network.securitygroups_rpc import SecurityGroupCallbacks
    from nefos.control.scheduler.manager import SchedulerManager
    return {ComputeManager: "compute", ConductorManager: "conductor", SchedulerManager: "scheduler",
            NetworkManager: "network", L2AgentCallbacks: "q-plugin", SecurityGroupCallbacks: "q-securitygroup-plugin",
            DhcpCallbacks: "q-dhcp-plugin", MetadataCallbacks: "q-metadata", AgentStateCallbacks: "q-reports-plugin",
            L3PluginEndpoint: "q-l3-plugin", DhcpAgentEndpoint: "dhcp_agent", L3AgentEndpoint: "l3_agent",
            L2AgentEndpoint: "q-agent-notifier"}


# What Nefos 0.9.0 served (its messages carried no version: each is 1.0 of its interface).
SURFACE_OF_0_9 = {
    "conductor": {"build_instances", "live_migrate_instance", "migrate_server", "unshelve_instance"},
    "scheduler": {"select_destinations"},
    "q-plugin": {"dhcp_ready_on_ports", "get_device_details", "update_device_down", "update_device_up"},
    "q-l3-plugin": {"sync_routers"},
    "dhcp_agent": {"network_changed"},
    "l3_agent": {"routers_updated"},
}


def test_every_served_endpoint_declares_its_interface():
    served = _served_endpoints()
    assert {cls.rpc_interface.topic for cls in served} == set(interfaces.BY_TOPIC)
    for cls, topic in served.items():
        assert cls.rpc_interface is interfaces.BY_TOPIC[topic]
        cls.rpc_interface.check_endpoint(cls)  # each declared method is a coroutine of it
    # never part of the compute interface: what runs only inside the host's own process
    for internal in ("init_host", "cleanup_host", "power_update", "periodic_sync_power_states"):
        assert internal not in interfaces.COMPUTE.methods


def test_1_0_of_each_interface_is_what_0_9_served():
    """Nefos 0.9.0's messages carried no version: 1.0 of each of its topics is exactly its
    surface; what came later is declared later (a new topic starts at 1.0)."""
    assert set(interfaces.RELEASES["0.9"]) == set(interfaces.TOPICS_OF_0_9)
    assert set(interfaces.RELEASES["0.9"].values()) == {"1.0"}
    for topic, methods in SURFACE_OF_0_9.items():
        interface = interfaces.BY_TOPIC[topic]
        assert {m for m, added in interface.methods.items() if added == "1.0"} == methods, topic
    assert "evacuate_instance" in interfaces.CONDUCTOR.methods
    assert interfaces.CONDUCTOR.methods["instance_get"] == "1.1"  # the host surface came after 0.9.0
    assert interfaces.COMPUTE.args["rebuild_instance"] == {"migration": "1.1", "new_pass": "1.2"}
    assert interfaces.COMPUTE.methods["rebuild_instance"] == "1.0"


# Where pins come from -------------------------------------------------------------------------

def test_upgrade_levels_from_the_config_file_and_the_environment(tmp_path, monkeypatch):
    assert load_config().upgrade_levels == {}  # the default: no pin, the current versions
    ini = tmp_path / "nefos.conf"
    ini.write_text("[DEFAULT]\nhost = h\n[upgrade_levels]\ncompute = 1.0\nconductor = auto\n"
                   "scheduler = 0.9\nnetwork =\n")
    cfg = load_config(ini)
    assert cfg.upgrade_levels == {"compute": "1.0", "conductor": "auto", "scheduler": "0.9"}
    assert cfg.host == "h"
    monkeypatch.setenv("NEFOS_UPGRADE_LEVELS_Q_PLUGIN", "1.0")
    assert load_config(ini).upgrade_levels["q-plugin"] == "1.0"
    for bad in ("compute = latest", "computer = 1.0", "compute = 1"):
        ini.write_text(f"[upgrade_levels]\n{bad}\n")
        with pytest.raises(ConfigError, match="upgrade_levels"):
            load_config(ini)


async def test_a_pin_names_a_version_or_a_release():
    caps = VersionCaps({"compute": "1.0", "conductor": "0.9"}, releases=interfaces.RELEASES)
    assert await caps.cap(interfaces.COMPUTE) == "1.0"
    assert await caps.cap(interfaces.CONDUCTOR) == "1.0"
    assert await caps.cap(interfaces.SCHEDULER) is None


@pytest.fixture
async def db(tmp_path):
    from nefos.db.migrate import upgrade
    from nefos.db.session import Database
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'services.sqlite'}")
    await upgrade(database)
    yield database
    await database.dispose()


async def _service(db, host: str, binary: str, version: str | None, *, seen_ago: float = 0,
                   deleted: bool = False) -> None:
    from nefos.db.models import Service, utcnow
    async with db.transaction() as s:
        s.add(Service(uuid=str(uuid.uuid4()), host=host, binary=binary, topic="greeter", version=version,
                      last_seen_up=utcnow() - dt.timedelta(seconds=seen_ago), report_count=1,
                      deleted=1 if deleted else 0))


async def test_auto_is_the_oldest_version_the_running_services_report(db):
    binary = "nefos-greeter"
    assert await minimum_service_version(db, binary, 60) is None  # none runs: no pin
    await _service(db, "a", binary, "1.10")
    await _service(db, "b", binary, "1.3")
    await _service(db, "gone", binary, "1.1", seen_ago=600)  # down: not running
    await _service(db, "old", binary, "1.2", deleted=True)
    await _service(db, "other", "nefos-other", "1.0")
    assert await minimum_service_version(db, binary, 60) == "1.3"  # 1.3 < 1.10
    await _service(db, "c", binary, None)  # a service from before versioning: 1.0
    assert await minimum_service_version(db, binary, 60) == "1.0"

    interface = RPCInterface("greeter", binary=binary, **GREETER_11)
    caps = VersionCaps({"greeter": "auto"}, db=db)
    assert await caps.cap(interface) == "1.0"
    await _service(db, "d", binary, "1.1")
    assert await caps.cap(interface) == "1.0"  # kept for the process's life, as Nova's


async def test_a_service_row_reports_the_version_it_serves(db):
    from sqlalchemy import select

    from nefos.db.models import Service as ServiceRow
    from nefos.service import Runtime, Service

    class ComputeLike(Endpoint):
        rpc_interface = interfaces.COMPUTE

    rt = Runtime(load_config(), db, create_bus("local://"))
    await Service(rt, "nova-compute", "compute", "h1", endpoint=ComputeLike()).register()
    await Service(rt, "nefos-api", None, "h1").register()
    async with db.reader() as s:
        rows = {r.binary: r.version for r in (await s.execute(select(ServiceRow))).scalars()}
    assert rows == {"nova-compute": interfaces.COMPUTE.version, "nefos-api": None}
    assert await minimum_service_version(db, "nova-compute", 60) == interfaces.COMPUTE.version


@pytest.mark.parametrize("level, expected", [(None, None), ("1.0", "1.0"), ("0.9", "1.0"), ("auto", "1.0")])
async def test_a_process_s_clients_send_within_its_upgrade_levels(tmp_path, level, expected):
    """The Runtime hands [upgrade_levels] to every client of its bus (``auto``: from the services
    rows of the same database; here one compute host of 0.9.0, whose row has no version)."""
    from nefos.clients.compute import ComputeRPCAPI
    from nefos.clients.conductor import ConductorAPI
    from nefos.service import Runtime
    cfg = load_config(state_dir=tmp_path, **({"upgrade_levels": {"compute": level}} if level else {}))
    rt = await Runtime.open(cfg, migrate=True)
    try:
        await _service(rt.db, "old-host", "nova-compute", None)
        assert await ComputeRPCAPI(rt.bus).client.version_cap() == expected
        assert await ConductorAPI(rt.bus).client.version_cap() is None  # not pinned
    finally:
        await rt.close()
