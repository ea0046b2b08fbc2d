"""VIFs on Linux bridges: each network has a bridge (``brq<network id[:11]>``); a guest's tap
(``tap<port id[:11]>``, made by libvirt from ``<interface type='ethernet'>`` and attached to
nothing) is put into it by the host's L2 agent (``nefos.network.agents.l2_agent``), which creates the
bridge when missing (``ensure_bridge``, also used by the DHCP agent)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from nefos import exceptions

LOG = logging.getLogger(__name__)

_locks: dict[int, asyncio.Lock] = {}


def bridge_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}/bridge").is_dir()


def device_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


async def _ip(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec("ip", *args, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    return proc.returncode, err.decode(errors="replace").strip()


async def ensure_bridge(name: str) -> None:
    """Create the Linux bridge ``name`` when missing and bring it up."""
    if len(name) > 15:
        raise exceptions.InstanceDeployFailure(reason=f"bridge name {name!r} is longer than 15 characters")
    loop_id = id(asyncio.get_running_loop())
    lock = _locks.setdefault(loop_id, asyncio.Lock())
    async with lock:
        if not bridge_exists(name):
            rc, err = await _ip("link", "add", "name", name, "type", "bridge")
            if rc != 0 and not bridge_exists(name):
                raise exceptions.InstanceDeployFailure(reason=f"cannot create bridge {name}: {err}")
            LOG.info("created bridge %s", name)
        rc, err = await _ip("link", "set", name, "up")
        if rc != 0:
            raise exceptions.InstanceDeployFailure(reason=f"cannot bring bridge {name} up: {err}")


async def enslave(dev: str, bridge: str) -> tuple[int, str]:
    """Put ``dev`` into ``bridge`` and bring it up: (return code, ``ip``'s error)."""
    return await _ip("link", "set", "dev", dev, "master", bridge, "up")


def vif_bridge(vif: dict) -> str:
    network = vif.get("network") or {}
    bridge = network.get("bridge")
    if not bridge:
        net_id = network.get("id") or ""
        bridge = "brq" + net_id[:11]
    return bridge


def vif_devname(vif: dict) -> str:
    return vif.get("devname") or ("tap" + vif["id"][:11])
