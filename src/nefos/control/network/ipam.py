"""IP address management: subnet pools, gateway checks, free-address candidates, MACs.

Pure functions over ``ipaddress`` objects; the manager does the database work
(the ``ipallocations`` primary key is what makes an address unique).
"""

from __future__ import annotations

import ipaddress
import random
from typing import Iterable, Iterator

from nefos import exceptions

MAC_PREFIX = "fa:16:3e"


def random_mac() -> str:
    return MAC_PREFIX + "".join(f":{random.randint(0, 255):02x}" for _ in range(3))


def network_of(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(cidr, strict=True)


def first_last_usable(net) -> tuple[int, int]:
    """The first and last address a host may use (no network or IPv4 broadcast address)."""
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.version == 4:
        if net.prefixlen <= 30:
            first, last = first + 1, last - 1
    elif net.prefixlen < 127:
        first += 1  # the subnet-router anycast address
    return first, last


def default_gateway(net) -> str | None:
    first, last = first_last_usable(net)
    if first > last:
        return None
    return str(ipaddress.ip_address(first) if net.version == 4 else ipaddress.IPv6Address(first))


def default_pools(net, gateway: str | None) -> list[dict]:
    """The subnet's usable addresses minus the gateway, as Neutron's allocation_pools."""
    first, last = first_last_usable(net)
    ranges = [(first, last)] if first <= last else []
    if gateway:
        g = int(ipaddress.ip_address(gateway))
        split = []
        for a, b in ranges:
            if a <= g <= b:
                if a <= g - 1:
                    split.append((a, g - 1))
                if g + 1 <= b:
                    split.append((g + 1, b))
            else:
                split.append((a, b))
        ranges = split
    return [_pool(net.version, a, b) for a, b in ranges]


def _pool(version: int, a: int, b: int) -> dict:
    cls = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    return {"start": str(cls(a)), "end": str(cls(b))}


def check_pools(net, pools: list[dict], gateway: str | None) -> list[dict]:
    """Validate user-given pools: inside the cidr, start <= end, no overlap, not the gateway."""
    spans = []
    for pool in pools:
        try:
            start = ipaddress.ip_address(pool["start"])
            end = ipaddress.ip_address(pool["end"])
        except (ValueError, KeyError, TypeError):
            raise exceptions.InvalidAllocationPool(pool=pool)
        if start.version != net.version or end.version != net.version or start > end:
            raise exceptions.InvalidAllocationPool(pool=_fmt(pool))
        first, last = int(net.network_address), int(net.broadcast_address)
        if int(start) < first or int(end) > last:
            raise exceptions.OutOfBoundsAllocationPool(pool=_fmt(pool), subnet_cidr=str(net))
        if net.version == 4 and net.prefixlen <= 30 and (
                int(start) == first or int(end) == last):
            raise exceptions.OutOfBoundsAllocationPool(pool=_fmt(pool), subnet_cidr=str(net))
        spans.append((int(start), int(end), {"start": str(start), "end": str(end)}))
    spans.sort(key=lambda t: t[0])
    for (a1, b1, p1), (a2, b2, p2) in zip(spans, spans[1:]):
        if a2 <= b1:
            raise exceptions.OverlappingAllocationPools(pool_1=_fmt(p1), pool_2=_fmt(p2), subnet_cidr=str(net))
    if gateway:
        g = int(ipaddress.ip_address(gateway))
        for a, b, p in spans:
            if a <= g <= b:
                raise exceptions.GatewayConflictWithAllocationPools(ip_address=gateway, pool=_fmt(p))
    return [p for _, _, p in spans]


def _fmt(pool: dict) -> str:
    return f"{pool.get('start')}-{pool.get('end')}"


def in_pools(address: str, pools: list[dict]) -> bool:
    a = int(ipaddress.ip_address(address))
    return any(int(ipaddress.ip_address(p["start"])) <= a <= int(ipaddress.ip_address(p["end"]))
               for p in pools)


def usable_in_subnet(address: str, cidr: str) -> bool:
    """Whether a port may hold ``address`` on the subnet ``cidr`` (any host address of it)."""
    ip = ipaddress.ip_address(address)
    net = network_of(cidr)
    if ip.version != net.version or ip not in net:
        return False
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.version == 4 and net.prefixlen <= 30 and int(ip) in (first, last):
        return False
    return True


def pool_size(pools: list[dict]) -> int:
    return sum(int(ipaddress.ip_address(p["end"])) - int(ipaddress.ip_address(p["start"])) + 1
               for p in pools)


def _pool_range(pool: dict, above: int | None = None) -> tuple[type, int, int]:
    """(address class, first, last) of an allocation pool as integers, from above ``above``."""
    start = ipaddress.ip_address(pool["start"])
    first = int(start) if above is None else max(int(start), above + 1)
    return type(start), first, int(ipaddress.ip_address(pool["end"]))


def candidates(pools: list[dict], taken: set[str]) -> Iterator[str]:
    """Free addresses of the pools, lowest first (``taken`` holds canonical strings)."""
    taken_ints = {int(ipaddress.ip_address(t)) for t in taken}
    for pool in pools:
        cls, i, last = _pool_range(pool)
        while i <= last:
            if i not in taken_ints:
                yield str(cls(i))
            i += 1


def after(pools: list[dict], address: str) -> Iterator[str]:
    """The pools' addresses above ``address``, in order (no wrapping round to the start)."""
    above = ipaddress.ip_address(address)
    for pool in pools:
        cls, i, last = _pool_range(pool, int(above))
        if cls is not type(above):
            continue
        while i <= last:
            yield str(cls(i))
            i += 1


def canonical(address: str) -> str:
    return str(ipaddress.ip_address(address))


def eui64(cidr: str, mac: str) -> str:
    """The SLAAC address of ``mac`` on the /64 ``cidr``."""
    net = network_of(cidr)
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    iid = octets[:3] + [0xFF, 0xFE] + octets[3:]
    value = int(net.network_address) | int.from_bytes(bytes(iid), "big")
    return str(ipaddress.IPv6Address(value))


def overlaps(cidr: str, others: Iterable[str]) -> bool:
    net = network_of(cidr)
    for other in others:
        o = ipaddress.ip_network(other, strict=False)
        if o.version == net.version and net.overlaps(o):
            return True
    return False
