"""Linux bridges and links of the host, through ``ip`` (what the agents and the compute host's VIF
plugging share)."""

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


IFF_UP = 0x1


def link_is_up(name: str) -> bool:
    """Whether ``name`` is administratively up (``ip link set ... up``); False when it is gone."""
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_UP)
    except (OSError, ValueError):
        return False


async def ip(*args: str) -> tuple[int, str]:
    """``ip args``: (return code, its error output)."""
    proc = await asyncio.create_subprocess_exec("ip", *args, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    return proc.returncode, err.decode(errors="replace").strip()


async def ensure_bridge(name: str, mtu: int | None = None) -> None:
    """Create the Linux bridge ``name`` when missing and bring it up (with ``mtu`` when given)."""
    if len(name) > 15:
        raise exceptions.InstanceDeployFailure(reason=f"bridge name {name!r} is longer than 15 characters")
    loop_id = id(asyncio.get_running_loop())
    lock = _locks.setdefault(loop_id, asyncio.Lock())
    async with lock:
        if not bridge_exists(name):
            rc, err = await ip("link", "add", "name", name, "type", "bridge")
            if rc != 0 and not bridge_exists(name):
                raise exceptions.InstanceDeployFailure(reason=f"cannot create bridge {name}: {err}")
            LOG.info("created bridge %s", name)
        up = ["link", "set", name] + (["mtu", str(mtu)] if mtu else []) + ["up"]
        rc, err = await ip(*up)
        if rc != 0:
            raise exceptions.InstanceDeployFailure(reason=f"cannot bring bridge {name} up: {err}")


async def set_link_up(dev: str, up: bool) -> tuple[int, str]:
    """``ip link set dev up|down``: (return code, ``ip``'s error)."""
    return await ip("link", "set", "dev", dev, "up" if up else "down")


async def enslave(dev: str, bridge: str, mtu: int | None = None) -> tuple[int, str]:
    """Put ``dev`` into ``bridge`` and bring it up (with ``mtu`` when given): (return code, ``ip``'s error)."""
    return await ip("link", "set", "dev", dev, "master", bridge, *(["mtu", str(mtu)] if mtu else []), "up")
