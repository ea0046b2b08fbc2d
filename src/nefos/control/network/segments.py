"""Networks' segments (Neutron's ML2 type drivers, reduced to ``vxlan`` and ``local``).

A tenant network gets a segment of the first of ``tenant_network_types``: ``vxlan`` with a VNI
from ``vni_ranges`` that no other network has (the lowest free; the unique key on
(network_type, segmentation_id) settles two creations racing for one, the loser takes the next),
or ``local`` (no VNI: the network lives on one host). External networks are ``local``: their
bridge is the host's external bridge. An admin may ask for a type and a VNI
(``provider:network_type``, ``provider:segmentation_id``); a VNI taken answers 409.

The MTU of a network: ``global_physnet_mtu`` (the underlay's), less the VXLAN encapsulation
(50 bytes: outer Ethernet 14, IPv4 20, UDP 8, VXLAN 8) for ``vxlan``; asking for more answers 400.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from nefos import exceptions
from nefos.config import parse_vni_ranges
from nefos.db.models import Network
from nefos.db.session import savepoint

VXLAN = "vxlan"
LOCAL = "local"
VXLAN_OVERHEAD = 50
ALLOCATION_ATTEMPTS = 200  # races lost before giving up (each loss: another creation got that VNI)
PROVIDER_KEYS = ("provider:network_type", "provider:segmentation_id", "provider:physical_network")


def max_mtu(cfg, network_type: str) -> int:
    return cfg.global_physnet_mtu - (VXLAN_OVERHEAD if network_type == VXLAN else 0)


def choose(cfg, body: dict) -> tuple[str, int | None, int]:
    """(network type, the VNI asked for or None, MTU) of a network being created from ``body``
    (validated: provider attributes only an admin's)."""
    network_type = body.get("provider:network_type")
    vni = body.get("provider:segmentation_id")
    if network_type is None:
        network_type = LOCAL if body.get("router:external") else cfg.tenant_network_types.split(",")[0]
    if network_type == LOCAL and vni is not None:
        raise exceptions.InvalidInput(error_message="provider:segmentation_id is not allowed for a local network")
    limit = max_mtu(cfg, network_type)
    mtu = body.get("mtu")
    if mtu is None:
        mtu = limit
    elif mtu > limit:
        raise exceptions.InvalidInput(error_message=f"Requested MTU is too big, maximum is {limit}")
    return network_type, vni, mtu


async def allocate(s, cfg, network_id: str, network_type: str, vni: int | None) -> int | None:
    """Give the network ``network_id`` (flushed in ``s``) its VNI: ``vni`` when asked (409 when
    taken), else the lowest free in ``vni_ranges`` (503 ``NoNetworkAvailable`` when none is left)."""
    if network_type != VXLAN:
        return None
    if vni is not None:
        if not await _take(s, network_id, vni):
            raise exceptions.Conflict(f"Unable to create the network. The VNI {vni} is in use.")
        return vni
    lost: set[int] = set()  # taken by a transaction this one could not see (REPEATABLE READ)
    for _attempt in range(ALLOCATION_ATTEMPTS):
        taken = set((await s.execute(select(Network.segmentation_id).where(
            Network.network_type == VXLAN, Network.segmentation_id.is_not(None)))).scalars())
        candidate = _lowest_free(parse_vni_ranges(cfg.vni_ranges), taken | lost)
        if candidate is None:
            raise exceptions.NoNetworkAvailable()
        if await _take(s, network_id, candidate):
            return candidate
        lost.add(candidate)
    raise exceptions.NoNetworkAvailable()


def _lowest_free(ranges: list[tuple[int, int]], taken: set[int]) -> int | None:
    for lo, hi in ranges:
        vni = lo
        while vni <= hi:
            if vni not in taken:
                return vni
            vni += 1
    return None


async def _take(s, network_id: str, vni: int) -> bool:
    try:
        async with savepoint(s):
            await s.execute(update(Network).where(Network.id == network_id).values(segmentation_id=vni)
                            .execution_options(synchronize_session=False))
        return True
    except IntegrityError:
        return False


def provider_view(row) -> dict:
    return {"provider:network_type": row.network_type or LOCAL,
            "provider:segmentation_id": row.segmentation_id,
            "provider:physical_network": None}
