"""One router in its namespace (``qrouter-<router id>``): what the L3 agent does to make a router's
configuration (``Routers.routers_for_agent``) true on this machine, idempotently.

* an interface: a veth pair, ``qr-<port[:11]>`` inside (the port's MAC, the subnet's gateway IP),
  ``tap<port[:11]>`` outside in the network's bridge ``brq<network[:11]>`` (``vif.ensure_bridge``
  / ``vif.enslave``, as the DHCP agent's ports);
* the gateway: ``qg-<port[:11]>`` inside with the gateway port's address and every floating IP as
  a /32 (the router answers ARP for them on the external bridge itself), ``qgo<port[:11]>`` outside
  in the Nefos external bridge; a default route to the external subnet's gateway only when that
  subnet has one (the host's own address on that bridge);
* ``net.ipv4.ip_forward = 1`` inside the namespace only;
* nftables inside the namespace only, one table ``ip nefos-router`` replaced atomically
  (``nft -f``: the old table goes and the new one comes in one transaction): per floating IP a
  DNAT (floating -> fixed) and an SNAT (fixed -> floating, out of the gateway), then, with
  ``enable_snat``, an SNAT of the interfaces' subnets to the gateway address; and a filter on
  what the router forwards through its gateway: only to and from the external subnet's own
  addresses. The gateway's default route leads to the host (the external subnet's gateway); a host
  that forwards (``ip_forward = 1``: Docker and libvirt hosts) would route a guest's packet on
  out of the machine, and a packet from the machine's own networks in to a floating IP: the router
  drops both, so what is routed onto the external bridge stays on this machine whatever the host
  does.

Nothing here touches the host's namespace beyond the veths' outer ends and the bridges: no host
route, sysctl or firewall rule.
"""

from __future__ import annotations

import ipaddress
import logging

from nefos.agents.netns import dev_exists, netns_exists, run
from nefos.agents.ip_lib import ensure_bridge, enslave

LOG = logging.getLogger(__name__)

NAMESPACE_PREFIX = "qrouter-"
NFT_TABLE = "nefos-router"


def namespace(router_id: str) -> str:
    return NAMESPACE_PREFIX + router_id


def interface_devices(port_id: str) -> tuple[str, str]:
    """(inside, outside) device names of an interface port."""
    return "qr-" + port_id[:11], "tap" + port_id[:11]


def gateway_devices(port_id: str) -> tuple[str, str]:
    """(inside, outside) of the gateway port; the outside is no ``tap``: the L2 agent's
    business is guests' taps in their networks' bridges, not this one in the external bridge."""
    return "qg-" + port_id[:11], "qgo" + port_id[:11]


def ruleset(router: dict) -> str:
    """The namespace's nftables table for ``router`` (an ``nft -f`` script that replaces it)."""
    lines = [f"table ip {NFT_TABLE}", f"delete table ip {NFT_TABLE}", f"table ip {NFT_TABLE} {{"]
    gw = router.get("gateway")
    pre, post, forward = [], [], []
    if gw is not None:
        qg, _ = gateway_devices(gw["port_id"])
        external = ipaddress.ip_network(gw["cidr"], strict=False)
        forward += [f'oifname "{qg}" ip daddr != {external} drop',
                    f'iifname "{qg}" ip saddr != {external} drop']
        for fip in router["floating_ips"]:
            pre.append(f"ip daddr {fip['floating_ip_address']} dnat to {fip['fixed_ip_address']}")
            post.append(f'ip saddr {fip["fixed_ip_address"]} oifname "{qg}" snat to {fip["floating_ip_address"]}')
        if router["enable_snat"]:
            for cidr in sorted({i["cidr"] for i in router["interfaces"]}):
                post.append(f'ip saddr {cidr} oifname "{qg}" snat to {gw["ip_address"]}')
    for chain, hook, priority, rules in (("prerouting", "prerouting", "dstnat", pre),
                                         ("output", "output", "-100", pre),
                                         ("postrouting", "postrouting", "srcnat", post)):
        lines.append(f"  chain {chain} {{")
        lines.append(f"    type nat hook {hook} priority {priority}; policy accept;")
        lines += [f"    {r}" for r in rules]
        lines.append("  }")
    lines.append("  chain forward {")
    lines.append("    type filter hook forward priority filter; policy accept;")
    lines += [f"    {r}" for r in forward]
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


async def _ns(ns: str, *argv: str, check: bool = True) -> tuple[int, str]:
    return await run("ip", "netns", "exec", ns, *argv, check=check)


async def _addresses(ns: str, dev: str) -> set[str]:
    _, out = await run("ip", "-n", ns, "-o", "-4", "addr", "show", "dev", dev, check=False)
    found = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            found.add(parts[parts.index("inet") + 1])
    return found


async def _set_addresses(ns: str, dev: str, wanted: set[str]) -> None:
    current = await _addresses(ns, dev)
    for cidr in sorted(wanted - current):
        await run("ip", "-n", ns, "addr", "replace", cidr, "dev", dev)
    for cidr in sorted(current - wanted):
        await run("ip", "-n", ns, "addr", "del", cidr, "dev", dev, check=False)


async def _links(ns: str) -> set[str]:
    _, out = await run("ip", "-n", ns, "-o", "link", "show", check=False)
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


async def _plug(ns: str, inside: str, outside: str, bridge: str, mac: str | None) -> None:
    """A veth pair, ``inside`` in ``ns`` (with ``mac``), ``outside`` up in ``bridge``."""
    if inside not in await _links(ns):
        if dev_exists(outside):
            await run("ip", "link", "del", outside, check=False)
        await run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        await run("ip", "link", "set", inside, "netns", ns)
    await ensure_bridge(bridge)
    rc, err = await enslave(outside, bridge)
    if rc != 0:
        raise RuntimeError(f"cannot put {outside} into {bridge}: {err}")
    if mac:
        await run("ip", "-n", ns, "link", "set", inside, "address", mac)
    await run("ip", "-n", ns, "link", "set", inside, "up")


async def apply(router: dict, external_bridge: str, previous: dict | None) -> None:
    """Make ``router`` (``routers_for_agent``'s) true in its namespace; ``previous`` is what was
    applied before (its extra routes are taken away when they went)."""
    ns = namespace(router["id"])
    if not netns_exists(ns):
        await run("ip", "netns", "add", ns)
    await run("ip", "-n", ns, "link", "set", "lo", "up")
    await _ns(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    wanted_links = {"lo"}
    for i in router["interfaces"]:
        inside, outside = interface_devices(i["port_id"])
        await _plug(ns, inside, outside, "brq" + i["network_id"][:11], i.get("mac_address"))
        wanted_links.add(inside)
    for inside, outside in {interface_devices(i["port_id"]) for i in router["interfaces"]}:
        await _set_addresses(ns, inside, {f"{i['ip_address']}/{i['prefixlen']}" for i in router["interfaces"]
                                          if interface_devices(i["port_id"])[0] == inside})
    gw = router.get("gateway")
    if gw is not None:
        qg, outside = gateway_devices(gw["port_id"])
        await _plug(ns, qg, outside, external_bridge, gw.get("mac_address"))
        wanted_links.add(qg)
        await _set_addresses(ns, qg, {f"{gw['ip_address']}/{gw['prefixlen']}"} |
                             {f"{f['floating_ip_address']}/32" for f in router["floating_ips"]})
        if gw.get("subnet_gateway_ip"):
            await run("ip", "-n", ns, "route", "replace", "default", "via", gw["subnet_gateway_ip"], "dev", qg)
        else:
            await run("ip", "-n", ns, "route", "del", "default", check=False)
    for name in await _links(ns) - wanted_links:  # interfaces removed, an old gateway
        if name.startswith(("qr-", "qg-")):
            await run("ip", "-n", ns, "link", "del", name, check=False)  # takes its peer along
    old = {(r["destination"], r["nexthop"]) for r in (previous or {}).get("routes", [])}
    new = {(r["destination"], r["nexthop"]) for r in router["routes"]}
    for dest, hop in sorted(old - new):
        await run("ip", "-n", ns, "route", "del", dest, "via", hop, check=False)
    for dest, hop in sorted(new):
        await run("ip", "-n", ns, "route", "replace", str(ipaddress.ip_network(dest)), "via", hop)
    await run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin=ruleset(router).encode())
    LOG.info("router %s: %d interface(s), gateway %s, %d floating IP(s)", router["id"], len(router["interfaces"]),
             gw["ip_address"] if gw else "none", len(router["floating_ips"]))


async def destroy(router_id: str) -> None:
    """The router's namespace and everything in it (the veths' outer ends go with their peers)."""
    ns = namespace(router_id)
    if not netns_exists(ns):
        return
    for name in await _links(ns):
        if name.startswith(("qr-", "qg-")):
            await run("ip", "-n", ns, "link", "del", name, check=False)
    await run("ip", "netns", "del", ns, check=False)
    LOG.info("router %s: namespace %s removed", router_id, ns)
