"""The network service is composed, not inherited: each method the bus serves on topic
``network`` is the method of the one service that defines it, and no service reaches back to the
manager that wires them (each holds only what it was given)."""

from __future__ import annotations

from nefos.bus import interfaces
from nefos.control.network.manager import SERVED, NetworkManager


def test_each_bus_method_is_the_owning_services_own(manager):
    for method in interfaces.NETWORK.methods:
        bound = getattr(manager, method)
        owners = [attribute for attribute in SERVED if bound.__self__ is getattr(manager, attribute)]
        assert len(owners) == 1, method
        assert bound == getattr(getattr(manager, owners[0]), method)


def test_no_service_holds_the_manager(manager):
    assert isinstance(manager, NetworkManager)
    for attribute in SERVED:
        service = getattr(manager, attribute)
        assert all(value is not manager for value in vars(service).values()), attribute
