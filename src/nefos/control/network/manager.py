"""The network service: one service object per resource family, composed.

Each service owns its resources' operations and is given what it uses, nothing else:

=============================  ==========================================================
``store`` ``NetworkStore``      the shared database; the change listeners and port hooks
``quotas`` ``NetworkQuotas``    the quota API; usage counted inside each change
``security_groups``            groups and rules; a project's default group
``ports``                      ports, their addresses, status and binding
``networks``                   networks and subnets
``routers``                    routers, their interfaces and gateways; the L3 agents' sync
``floating_ips``               floating IPs
``auto_allocated_topologies``  a project's network built on first use
``instance_networks``          a server create's networking questions in one call
=============================  ==========================================================

``NetworkManager`` wires them and is what the bus serves on topic ``network``: each method of
``interfaces.NETWORK`` is the one of the service that defines it. The Networking API
(``rest.py``) and the agents' callbacks (``agent_rpc``, ``dhcp_rpc``, ``l3_rpc``,
``securitygroups_rpc``) call the owning service directly. Arguments and results are JSON
(Neutron's resource shapes).

Invariants that must hold across concurrent requests are kept by the
database: an IP address is unique per network by the ``ipallocations``
primary key (pick a free candidate, insert it in a savepoint, and on a
duplicate try the next one), a MAC is unique per network by a unique key,
a project's default security group is unique by ``default_security_group``'s
primary key, and quota usage changes by conditional UPDATEs in the same
transaction as the resource.
"""

from __future__ import annotations

import asyncio

from nefos.bus import Endpoint, interfaces
from nefos.control.network.auto_allocate import AutoAllocatedTopologies
from nefos.control.network.floating_ips import FloatingIPs
from nefos.control.network.instance_networks import InstanceNetworks
from nefos.control.network.networks import Networks
from nefos.control.network.ports import Ports
from nefos.control.network.quotas import NetworkQuotas
from nefos.control.network.routers import Routers
from nefos.control.network.security_groups import SecurityGroups
from nefos.control.network.store import NetworkStore

# The services whose methods the bus serves: the manager's attribute -> the service's class.
SERVED = {
    "networks": Networks, "ports": Ports, "security_groups": SecurityGroups, "routers": Routers,
    "floating_ips": FloatingIPs, "quotas": NetworkQuotas, "auto_allocated_topologies": AutoAllocatedTopologies,
    "instance_networks": InstanceNetworks,
}


class NetworkManager(Endpoint):
    """The network services, wired; served on bus topic ``network``."""

    rpc_interface = interfaces.NETWORK

    def __init__(self, rt):
        cfg = rt.cfg
        self.store = NetworkStore(rt.db)
        self.quotas = NetworkQuotas(self.store, cfg)
        self.security_groups = SecurityGroups(self.store, self.quotas)
        self.ports = Ports(self.store, self.quotas, self.security_groups, cfg)
        self.networks = Networks(self.store, self.quotas, cfg)
        self.routers = Routers(self.store, self.quotas, self.networks, self.ports)
        self.floating_ips = FloatingIPs(self.store, self.quotas, self.ports)
        self.auto_allocated_topologies = AutoAllocatedTopologies(self.store, cfg, self.networks, self.routers)
        self.instance_networks = InstanceNetworks(self.store, self.quotas, self.networks, self.ports)


class _ServedBy:
    """A bus method of ``NetworkManager``: the method of that name of the service ``attribute``
    (on the class, the service class's function, so the interface check sees a coroutine)."""

    def __init__(self, attribute: str, method: str):
        self.attribute, self.method = attribute, method

    def __get__(self, manager, owner=None):
        if manager is None:
            return getattr(SERVED[self.attribute], self.method)
        return getattr(getattr(manager, self.attribute), self.method)


def _owner(method: str) -> str:
    owners = [attribute for attribute, service in SERVED.items()
              if asyncio.iscoroutinefunction(getattr(service, method, None))]
    if len(owners) != 1:
        raise TypeError(f"network bus method {method}: served by {owners or 'no service'}, not by one")
    return owners[0]


for _method in interfaces.NETWORK.methods:
    setattr(NetworkManager, _method, _ServedBy(_owner(_method), _method))
