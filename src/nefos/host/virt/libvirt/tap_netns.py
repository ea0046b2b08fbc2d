"""Guests' taps for a compute host in a network namespace other than libvirtd's (option
``libvirtd_netns``): libvirtd makes each tap (``<interface type='ethernet'>``) in its own namespace,
the driver moves it into the compute host's, where the host's L2 agent sees and wires it."""

from __future__ import annotations

import asyncio
import logging
import os

from nefos import exceptions
from nefos.host.virt.libvirt.vif import device_exists

LOG = logging.getLogger(__name__)


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
