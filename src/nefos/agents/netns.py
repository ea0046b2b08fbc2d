"""What the agents that keep namespaces (DHCP, L3) share: running a command, and whether a device
or a namespace exists."""

from __future__ import annotations

import asyncio
from pathlib import Path


async def run(*argv: str, check: bool = True, stdin: bytes | None = None) -> tuple[int, str]:
    """Run ``argv``: (return code, standard output); with ``check`` a failure raises RuntimeError."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL)
    out, err = await proc.communicate(stdin)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode(errors='replace').strip()}")
    return proc.returncode, out.decode(errors="replace")


def dev_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def netns_exists(name: str) -> bool:
    return Path(f"/run/netns/{name}").exists()
