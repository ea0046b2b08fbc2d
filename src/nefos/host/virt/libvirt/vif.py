"""VIFs on Linux bridges: each network has a bridge (``brq<network id[:11]>``); a guest's tap
(``tap<port id[:11]>``, made by libvirt from ``<interface type='ethernet'>`` and attached to
nothing) is put into it by the host's L2 agent (``nefos.agents.l2_agent``), which creates the
bridge when missing (``nefos.agents.ip_lib.ensure_bridge``, also used by the DHCP agent)."""

from __future__ import annotations

import logging

from nefos.agents.ip_lib import bridge_exists, device_exists, enslave, ensure_bridge  # noqa: F401

LOG = logging.getLogger(__name__)


def vif_bridge(vif: dict) -> str:
    network = vif.get("network") or {}
    bridge = network.get("bridge")
    if not bridge:
        net_id = network.get("id") or ""
        bridge = "brq" + net_id[:11]
    return bridge


def vif_devname(vif: dict) -> str:
    return vif.get("devname") or ("tap" + vif["id"][:11])
