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
              payloads={"Pet": {"1.0": "1.0", "1.2": "1.1"}})


class Kennel(Endpoint):
    def __init__(self, interface: RPCInterface):
        self.rpc_interface = interface
        self.received: list[dict] = []

    async def adopt(self, ctx, pet: dict, note: str | None = None) -> None:
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


def test_the_instance_payload_declares_every_column_a_host_is_told_of():
    from nefos.db.models import Instance as InstanceRow
    assert set(Instance.FIELDS) == {column.name for column in InstanceRow.__table__.columns}
