"""One process owns a state directory's SQLite database.

SQLite lets one writer in at a time and makes any other wait (up to its busy timeout, on the
event loop of whichever service asked), so a second Nefos process on the same state directory
would stall the first one's heartbeats and API for as long. Every process that opens the SQLite
database takes an exclusive lock on ``nefos.lock`` beside it first, and a second one is refused
with a message that says what to do. The lock is the kernel's (``flock``): it goes with the
process, however that ends. Within one process the services share it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from nefos.exceptions import ConfigError

LOCK_NAME = "nefos.lock"
_held: dict[str, list[int]] = {}  # lock path -> [fd, users in this process]


def acquire(state_dir: str | Path) -> str:
    """Own ``state_dir``'s database for this process (ConfigError when another process does)."""
    path = str(Path(state_dir).resolve() / LOCK_NAME)
    if path in _held:
        _held[path][1] += 1
        return path
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(
            f"another Nefos process (pid {owner}) is using the SQLite database in {Path(state_dir).resolve()}; "
            f"SQLite serves one process: stop that one first, or give each process its own state_dir, "
            f"or set database_url to PostgreSQL or MySQL to run services in several processes") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[path] = [fd, 1]
    return path


def release(path: str) -> None:
    held = _held.get(path)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _held[path]
        os.close(held[0])  # closing the last descriptor releases the lock
