"""VIFs on Linux bridges: each network has a bridge (``brq<network id[:11]>``); a guest's tap
(``tap<port id[:11]>``, made by libvirt from ``<interface type='ethernet'>`` and attached to
nothing) is put into it by the host's L2 agent (``nefos.network.l2_agent``), which creates the
bridge when missing (``ensure_bridge``, also used by the DHCP agent). A compute host in a network
namespace other than libvirtd's (option ``libvirtd_netns``) first pulls each tap into its own
(``move_taps_here``)."""

from __future__ import annotations

import asyncio
import logging
import os
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


async def move_taps_here(taps: list[str], source_netns: str) -> None:
    """Move ``taps`` from the network namespace ``source_netns`` (a namespace file, where libvirtd
    made them) into this process's: the compute host runs in a namespace of its own and its L2
    agent wires only the taps it sees. A tun/tap device keeps working across the move (QEMU holds
    its file descriptor, not its name); the move takes the device down, the L2 agent's ``enslave``
    brings it up. A tap already here is left as it is."""
    for tap in taps:
        proc = await asyncio.create_subprocess_exec(
            "nsenter", f"--net={source_netns}", "ip", "link", "set", "dev", tap, "netns", str(os.getpid()),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0 and not device_exists(tap):
            raise exceptions.InstanceDeployFailure(
                reason=f"cannot move tap {tap} from {source_netns}: {err.decode(errors='replace').strip()}")
        LOG.info("tap %s moved from %s into this host's network namespace", tap, source_netns)
