"""The external network of an all-in-one cloud with real guests (`nefos up`): DevStack's ``public``.

Once, idempotently: the Nefos external bridge (``l3_external_bridge``, ``br-ex-nefos``) with the
host's address on it (``external_network_gateway``/prefix of ``external_network_cidr``, by default
172.24.4.1/24), and the network ``public`` (``router:external``; ``is_default``, the network
auto-allocated topologies are uplinked to, unless another is) with the subnet
``external_network_cidr``, gateway that host address, allocation pool .10–.250, no DHCP. Routers'
gateways and floating IPs live there (``nefos.agents.l3_agent``); the host reaches them through
the bridge. The bridge never holds a physical interface and nothing is routed or NATed from it to
the machine's uplink: what is on it stays on this machine.

The host's address on the bridge is where guests (through their routers) meet the host itself, so
the host accepts from the bridge only what answers it: replies to the connections the host opened
(``ssh`` to a floating IP) and the ICMP errors about them (conntrack ``ESTABLISHED,RELATED``);
anything new is dropped, so none of the host's services (whatever listens on ``0.0.0.0``: sshd,
a database, the APIs with a wildcard ``bind_host``) is reachable from a guest. One chain of the
filter table, ``nefos-in-<bridge>``, jumped to from ``INPUT`` for the bridge, rewritten in one
``iptables-restore`` (an operator opens a service to guests with a rule of their own before it).
Guests need nothing from the host: DHCP, DNS and metadata are served in each network's DHCP
namespace.
"""

from __future__ import annotations

import ipaddress
import logging

from nefos.context import admin_context
from nefos.agents.netns import run
from nefos.agents.ip_lib import ensure_bridge
from nefos.clients.network import network_rpc

LOG = logging.getLogger(__name__)

PUBLIC = "public"


async def ensure_external_bridge(bridge: str, address: str) -> None:
    """``bridge`` up with the host address ``address`` (``a.b.c.d/len``), closed to anything new
    from the bridge."""
    await ensure_bridge(bridge)
    await close_host_to_bridge(bridge)  # before the address: the host is never open on it
    await run("ip", "addr", "replace", address, "dev", bridge)


def host_input_chain(bridge: str) -> str:
    return f"nefos-in-{bridge}"


async def close_host_to_bridge(bridge: str) -> None:
    """The host accepts from ``bridge`` only replies to what it started (and ICMP errors about it)."""
    chain = host_input_chain(bridge)
    restore = ["*filter", f":{chain} - [0:0]",
               f"-A {chain} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
               f"-A {chain} -j DROP", "COMMIT", ""]
    await run("iptables-restore", "--noflush", stdin="\n".join(restore).encode())
    jump = ("INPUT", "-i", bridge, "-j", chain)
    if (await run("iptables", "-C", *jump, check=False))[0] != 0:
        await run("iptables", "-I", jump[0], "1", *jump[1:])


async def ensure_public_network(rt) -> dict:
    """The external network ``public`` (made when missing) and the bridge it lives on."""
    cfg = rt.cfg
    net = ipaddress.ip_network(cfg.external_network_cidr)
    await ensure_external_bridge(cfg.l3_external_bridge, f"{cfg.external_network_gateway}/{net.prefixlen}")
    ctx = admin_context()
    found = await network_rpc(rt.bus).call(ctx, "list_networks", filters={"name": [PUBLIC], "router:external": ["True"]})
    has_default = bool(await network_rpc(rt.bus).call(ctx, "list_networks", filters={"is_default": ["True"]}))
    if found:
        if not has_default:  # made before networks had is_default: the default one from now on
            return await network_rpc(rt.bus).call(ctx, "update_network", network_id=found[0]["id"],
                                     network={"is_default": True})
        return found[0]
    public = await network_rpc(rt.bus).call(ctx, "create_network", network={
        "name": PUBLIC, "router:external": True, "shared": False, "is_default": not has_default})
    hosts = list(net.hosts())
    await network_rpc(rt.bus).call(ctx, "create_subnet", subnet={
        "network_id": public["id"], "name": f"{PUBLIC}-subnet", "cidr": str(net), "ip_version": 4,
        "enable_dhcp": False, "gateway_ip": cfg.external_network_gateway,
        "allocation_pools": [{"start": str(hosts[9]), "end": str(hosts[min(249, len(hosts) - 1)])}]})
    LOG.info("external network %s (%s) on %s", public["id"], net, cfg.l3_external_bridge)
    return public
