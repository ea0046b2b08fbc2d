"""A host's VXLAN devices and their forwarding entries (the Linux-bridge agent's VXLAN side, with
L2 population), through rtnetlink (pyroute2).

Each VXLAN network with ports on this host gets ``vxlan-<VNI>`` in its bridge: UDP 4789 from the
agent's ``local_ip``, learning off (every remote MAC comes from the network service, none is
learnt from the wire), ARP proxy on (the device answers ARP for the addresses it has neighbour
entries for, so ARP requests need not cross the tunnels), MTU the network's. Its entries:

* ``00:00:00:00:00:00 dst <VTEP>`` (appended, one per remote host with ports on the network): where
  broadcast and unknown frames are flooded to;
* ``<MAC> dst <VTEP>`` per remote port;
* a permanent neighbour entry ``<IP> lladdr <MAC>`` per remote port address (the ARP proxy's).

``set_entries`` makes the device's entries exactly the ones given (stale ones removed).
"""

from __future__ import annotations

import logging

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

LOG = logging.getLogger(__name__)
logging.getLogger("pyroute2").setLevel(logging.INFO)  # its debug log is every netlink message

VXLAN_PORT = 4789  # IANA's
PREFIX = "vxlan-"
FLOOD_MAC = "00:00:00:00:00:00"
NTF_SELF = 0x02
NUD_PERMANENT = 0x80
ENOENT, EEXIST = 2, 17


def device_name(vni: int) -> str:
    return f"{PREFIX}{vni}"


async def _index(ipr, name: str) -> int | None:
    found = await ipr.link_lookup(ifname=name)
    return found[0] if found else None


async def ensure_device(vni: int, bridge: str, local_ip: str, mtu: int | None) -> str:
    """``vxlan-<vni>`` in ``bridge`` and up (created when missing)."""
    name = device_name(vni)
    async with AsyncIPRoute() as ipr:
        index = await _index(ipr, name)
        if index is None:
            try:
                await ipr.link("add", ifname=name, kind="vxlan", vxlan_id=vni, vxlan_local=local_ip,
                               vxlan_port=VXLAN_PORT, vxlan_learning=0, vxlan_proxy=1)
                LOG.info("created %s (VNI %d from %s)", name, vni, local_ip)
            except NetlinkError as exc:
                if exc.code != EEXIST:
                    raise
            index = await _index(ipr, name)
        master = (await _index(ipr, bridge))
        settings = {"master": master, "state": "up"}
        if mtu:
            settings["mtu"] = mtu
        await ipr.link("set", index=index, **settings)
    return name


async def remove_device(vni: int) -> bool:
    async with AsyncIPRoute() as ipr:
        index = await _index(ipr, device_name(vni))
        if index is None:
            return False
        try:
            await ipr.link("del", index=index)
        except NetlinkError as exc:
            if exc.code != ENOENT:
                raise
        LOG.info("removed %s", device_name(vni))
        return True


async def devices() -> dict[int, str]:
    """VNI -> the bridge its ``vxlan-<VNI>`` is in, of this host's VXLAN devices."""
    out = {}
    async with AsyncIPRoute() as ipr:
        names = {}
        links = [link async for link in await ipr.link("dump")]
        for link in links:
            names[link["index"]] = link.get("IFLA_IFNAME")
        for link in links:
            name = link.get("IFLA_IFNAME") or ""
            if name.startswith(PREFIX) and name[len(PREFIX):].isdigit():
                out[int(name[len(PREFIX):])] = names.get(link.get("IFLA_MASTER"), "")
    return out


async def current_entries(vni: int) -> tuple[set, set, set]:
    """(flood VTEPs, (MAC, VTEP) entries, (IP, MAC) neighbours) now on ``vxlan-<vni>``."""
    flood, macs, neigh = set(), set(), set()
    async with AsyncIPRoute() as ipr:
        index = await _index(ipr, device_name(vni))
        if index is None:
            return flood, macs, neigh
        async for entry in await ipr.fdb("dump", ifindex=index):
            dst, mac = entry.get("NDA_DST"), entry.get("NDA_LLADDR")
            if not dst or not (entry["flags"] & NTF_SELF):
                continue
            if mac == FLOOD_MAC:
                flood.add(dst)
            else:
                macs.add((mac, dst))
        async for entry in await ipr.neigh("dump", ifindex=index):
            if entry.get("NDA_DST") and entry.get("NDA_LLADDR") and entry["state"] & NUD_PERMANENT:
                neigh.add((entry.get("NDA_DST"), entry.get("NDA_LLADDR")))
    return flood, macs, neigh


async def set_entries(vni: int, vteps: dict[str, list]) -> bool:
    """Make ``vxlan-<vni>``'s entries those of ``vteps`` ({VTEP: [[MAC, IP or None], ...]});
    True when something changed."""
    want_flood = set(vteps)
    want_macs = {(mac.lower(), vtep) for vtep, ports in vteps.items() for mac, _ip in ports}
    want_neigh = {(ip, mac.lower()) for ports in vteps.values() for mac, ip in ports if ip}
    flood, macs, neigh = await current_entries(vni)
    if (flood, macs, neigh) == (want_flood, want_macs, want_neigh):
        return False
    async with AsyncIPRoute() as ipr:
        index = await _index(ipr, device_name(vni))
        if index is None:
            return False
        for vtep in sorted(want_flood - flood):
            await ipr.fdb("append", ifindex=index, lladdr=FLOOD_MAC, dst=vtep, flags=NTF_SELF, state=NUD_PERMANENT)
        for mac, vtep in sorted(want_macs - macs):
            await ipr.fdb("replace", ifindex=index, lladdr=mac, dst=vtep, flags=NTF_SELF, state=NUD_PERMANENT)
        for ip, mac in sorted(want_neigh - neigh):
            await ipr.neigh("replace", ifindex=index, dst=ip, lladdr=mac, state=NUD_PERMANENT)
        for ip, mac in sorted(neigh - want_neigh):
            if (ip, mac) not in want_neigh and ip not in {i for i, _ in want_neigh}:
                await _quietly(ipr.neigh("del", ifindex=index, dst=ip, lladdr=mac))
        for mac, vtep in sorted(macs - want_macs):
            if mac not in {m for m, _ in want_macs}:
                await _quietly(ipr.fdb("del", ifindex=index, lladdr=mac, dst=vtep, flags=NTF_SELF))
        for vtep in sorted(flood - want_flood):
            await _quietly(ipr.fdb("del", ifindex=index, lladdr=FLOOD_MAC, dst=vtep, flags=NTF_SELF))
    LOG.info("%s: flooding to %s, %d MAC(s), %d address(es)", device_name(vni),
             ", ".join(sorted(want_flood)) or "no host", len(want_macs), len(want_neigh))
    return True


async def _quietly(request) -> None:
    try:
        await request
    except NetlinkError as exc:
        if exc.code != ENOENT:
            raise
