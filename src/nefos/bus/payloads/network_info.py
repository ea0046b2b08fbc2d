"""The network info payload: a server's network info cache (Nova's ``network_info``), one VIF per
port: the port's id and MAC, how it is plugged (type, device name, binding details and profile),
whether it is active and survives the server's delete, its tag, and its network with the subnets
and addresses the guest is given. The network client builds it from the Networking service's
answers; it crosses the bus in the instance (``Instance.network_info``), in a host's saves of the
cache and in the answer to an interface attach.

Version history (newest last):

1.0  the VIF as the conductor interface 1.1 and the compute interface 1.0 carried it
"""

from __future__ import annotations

from nefos.bus.payloads.base import Payload, field

_TEXT = field(str)


class VIF(Payload):
    NAME = "VIF"
    VERSION = "1.0"
    FIELDS = {
        "id": _TEXT, "address": _TEXT,
        "type": _TEXT, "devname": _TEXT, "vnic_type": _TEXT,
        "active": field(bool), "preserve_on_delete": field(bool),
        "details": field(dict), "profile": field(dict),
        "network": field(dict),  # id, label, bridge, mtu, subnets (cidr, gateway, ips, dns, routes)
        "tag": _TEXT,
    }


def network_info(vifs: list | None) -> list[VIF]:
    """A network info cache as its VIFs (None: none)."""
    return [vif if isinstance(vif, VIF) else VIF(vif) for vif in vifs or ()]
