"""Typed bus payloads (``nefos.bus.payloads``): a payload holds only its declared fields, each of a
declared type; a message sent as an older version of its interface carries the payload version
that interface version carried, the later fields left out; a receiver reads a newer sender's
payload without the fields it does not know."""

from __future__ import annotations

import uuid

import pytest

from nefos.bus import Endpoint, create_bus
from nefos.bus.payloads.base import Payload, PayloadFieldError, field
from nefos.bus.payloads.instance import Instance
from nefos.bus.versioning import RPCClient, RPCInterface, VersionCaps, primitive
from nefos.context import RequestContext


class Pet(Payload):
    """A payload as two releases declare it: 1.1 added ``tricks``."""
    NAME = "Pet"
    VERSION = "1.1"
    FIELDS = {"name": field(str), "age": field(int), "tricks": field(list, added="1.1")}


# Version 1.2 of the interface carries Pet 1.1; 1.0 and 1.1 carried Pet 1.0.
KENNEL = dict(version="1.2", methods={"adopt": "1.0", "describe": "1.0"}, args={"adopt": {"note": "1.2"}},
              payloads={"Pet": {"1.0": "1.0", "1.2": "1.1"}}, typed_args={"pet": Pet})


class Kennel(Endpoint):
    def __init__(self, interface: RPCInterface):
        self.rpc_interface = interface
        self.received: list[dict] = []

    async def adopt(self, ctx, pet: Pet, note: str | None = None) -> None:
        assert isinstance(pet, Pet)
        self.received.append(pet)

    async def describe(self, ctx) -> Pet:
        return Pet(name="rex", age=3, tricks=["sit"])


def test_a_payload_takes_only_its_declared_fields_of_their_declared_types():
    pet = Pet(name="rex", age=3)
    assert pet.name == "rex" and pet["age"] == 3 and pet.tricks is None
    with pytest.raises(PayloadFieldError, match="has no field 'owner'"):
        Pet(name="rex", owner="alice")
    with pytest.raises(PayloadFieldError, match="Pet.age takes int, not str"):
        pet["age"] = "three"
    with pytest.raises(PayloadFieldError, match="has no field 'owner'"):
        pet.update(owner="alice")
    assert pet == {"name": "rex", "age": 3}


def test_a_payload_cannot_declare_a_field_newer_than_itself():
    with pytest.raises(ValueError, match="fields added after it: tricks"):
        type("Early", (Payload,), {"NAME": "Early", "VERSION": "1.0",
                                   "FIELDS": {"tricks": field(list, added="1.1")}})


def test_the_older_version_of_a_payload_leaves_out_the_fields_added_since():
    pet = Pet(name="rex", age=3, tricks=["sit"])
    assert pet.to_primitive() == {"name": "rex", "age": 3, "tricks": ["sit"]}
    assert pet.to_primitive("1.0") == {"name": "rex", "age": 3}
    assert type(pet.to_primitive()) is dict
    with pytest.raises(ValueError, match="newer than this release's"):
        pet.to_primitive("1.2")


def test_a_newer_sender_s_fields_are_read_without_what_this_release_does_not_know():
    assert Pet.from_primitive({"name": "rex", "age": 3, "colour": "brown"}) == {"name": "rex", "age": 3}
    assert Pet.from_primitive(None) is None


def test_an_interface_version_says_which_payload_version_it_carries():
    kennel = RPCInterface("kennel", **KENNEL)
    assert [kennel.payload_version("Pet", v) for v in (None, "1.0", "1.1", "1.2")] == ["1.0", "1.0", "1.0", "1.1"]
    assert primitive({"pets": [Pet(name="rex", tricks=["sit"])]}, kennel, "1.1") == {"pets": [{"name": "rex"}]}
    with pytest.raises(TypeError, match="carries no Instance payload"):
        primitive({"instance": Instance(uuid="u")}, kennel, "1.2")
    with pytest.raises(ValueError, match="carried from 1.3, after 1.2"):
        RPCInterface("kennel", version="1.2", methods={"adopt": "1.0"}, payloads={"Pet": {"1.3": "1.1"}})


@pytest.fixture
async def bus():
    bus = create_bus("local://")
    await bus.start()
    yield bus
    await bus.stop()


async def test_a_pinned_caller_sends_the_payload_version_of_its_pin_and_reads_a_newer_answer(bus):
    topic = f"kennel{uuid.uuid4().hex[:8]}"
    interface = RPCInterface(topic, **KENNEL)
    kennel = Kennel(interface)
    await bus.serve(topic, kennel)
    ctx = RequestContext(user_id="u", project_id="p")
    pet = Pet(name="rex", age=3, tricks=["sit"])

    await RPCClient(bus, interface).call(ctx, "adopt", pet=pet, note="good dog")
    assert await RPCClient(bus, interface).call(ctx, "describe") == {"name": "rex", "age": 3, "tricks": ["sit"]}

    bus.version_caps = VersionCaps({topic: "1.1"})
    await RPCClient(bus, interface).call(ctx, "adopt", pet=pet, note="good dog")
    answer = await RPCClient(bus, interface).call(ctx, "describe")
    assert type(answer) is dict  # the primitive: what every earlier release sent
    OldPet = type("OldPet", (Payload,), {"NAME": "Pet", "VERSION": "1.0",
                                         "FIELDS": {"name": field(str), "age": field(int)}})
    assert OldPet.from_primitive(answer) == {"name": "rex", "age": 3}
    assert kennel.received == [{"name": "rex", "age": 3, "tricks": ["sit"]}, {"name": "rex", "age": 3}]

    # A typed argument given as a mapping is sent as its payload: what it does not declare is refused.
    await RPCClient(bus, interface).call(ctx, "adopt", pet={"name": "fido", "age": 1})
    assert kennel.received[-1] == {"name": "fido", "age": 1}
    with pytest.raises(PayloadFieldError, match="Pet has no field 'owner'"):
        await RPCClient(bus, interface).call(ctx, "adopt", pet={"name": "fido", "owner": "alice"})
    assert len(kennel.received) == 3


def test_moves_and_request_specs_travel_as_their_payloads_on_every_interface_that_carries_them():
    from nefos.bus import interfaces
    from nefos.bus.payloads.migration import Migration
    from nefos.bus.payloads.request_spec import RequestSpec
    for interface in (interfaces.COMPUTE, interfaces.CONDUCTOR):
        sent = interface.typed({"migration": {"uuid": "m", "status": "accepted"}, "request_spec": {"num_instances": 1},
                                "instance_uuid": "u"})
        assert isinstance(sent["migration"], Migration) and isinstance(sent["request_spec"], RequestSpec)
        assert type(sent["instance_uuid"]) is str
        assert isinstance(interface.received({"migration": {"uuid": "m"}})["migration"], Migration)
        with pytest.raises(PayloadFieldError, match="Migration has no field 'memory_total'"):
            interface.typed({"migration": {"uuid": "m", "memory_total": 1}})
    assert isinstance(interfaces.SCHEDULER.received({"request_spec": {}})["request_spec"], RequestSpec)


def test_the_instance_payload_declares_every_column_a_host_is_told_of():
    from nefos.db.models import Instance as InstanceRow
    assert set(Instance.FIELDS) == {column.name for column in InstanceRow.__table__.columns}


def test_an_instance_s_network_info_is_a_list_of_vifs_and_a_vif_holds_only_its_declared_fields():
    from nefos.bus.payloads.network_info import VIF
    vif = {"id": "p1", "address": "fa:16:3e:00:00:01", "type": "bridge", "devname": "tapp1", "active": True,
           "network": {"id": "n1", "subnets": []}}
    instance = Instance.from_primitive({"uuid": "u", "network_info": [vif]})
    (read,) = instance.network_info
    assert isinstance(read, VIF) and read == vif and read.devname == "tapp1"
    with pytest.raises(PayloadFieldError, match="VIF has no field 'ovs_interfaceid'"):
        Instance(uuid="u", network_info=[dict(vif, ovs_interfaceid="p1")])
    with pytest.raises(PayloadFieldError, match="VIF.active takes bool, not str"):
        VIF(vif, active="yes")
