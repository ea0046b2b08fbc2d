"""Modes of what Nefos keeps on the host, so that no other local user reads it.

* The state directory and instances_path are ``0711`` (``passable_dir``): others may pass through
  (QEMU, running as libvirt's user, opens guests' disks under ``<state_dir>/instances``; dnsmasq,
  dropped to its own user, re-reads its hosts file under ``<state_dir>/dhcp``) but not list them.
  What the state directory holds for Nefos alone — the SQLite database, Fernet keys,
  passwords.yaml, clouds.yaml, compute_id — is ``0600``, the image store ``0700``.
* A directory another service's user must reach is ``0750`` with that user's group (``shared_dir``):
  each instance directory and the image cache with QEMU's group (``qemu_gid``), dnsmasq's
  directories with its own. Files in them that user reads are ``0640`` (``share_file``), guests'
  disks QEMU writes ``0660``. Without such a group (or not root): ``0700`` / ``0600``.

Modes are applied when a directory is created and tightened (never loosened) on an existing one,
so an operator's stricter choice stands.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
from pathlib import Path

PASSABLE_DIR_MODE = 0o711
PRIVATE_DIR_MODE = 0o700
SHARED_DIR_MODE = 0o750
PRIVATE_FILE_MODE = 0o600
SHARED_FILE_MODE = 0o640


def account(name: str) -> tuple[int, int] | None:
    """(uid, gid) of the local user ``name``, or None when there is none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _ensure_dir(path: Path, mode: int, gid: int | None = None) -> Path:
    path = Path(path)
    existed = path.is_dir()
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # not ours (an operator's directory): leave it be
        st = path.stat()
        if gid is not None and st.st_gid != gid:
            os.chown(path, -1, gid)
        current = stat.S_IMODE(st.st_mode)
        wanted = mode
        if existed:  # tightened, except the group bits a shared directory exists for
            wanted = (current & mode) | (mode & 0o070 if gid is not None else 0)
        if wanted != current:
            os.chmod(path, wanted)
    return path


def passable_dir(path: Path) -> Path:
    """The state directory, instances_path: others may pass through (0711), not list or read."""
    return _ensure_dir(path, PASSABLE_DIR_MODE)


def private_dir(path: Path) -> Path:
    return _ensure_dir(path, PRIVATE_DIR_MODE)


def shared_dir(path: Path, gid: int | None) -> Path:
    """A directory this process owns and group ``gid`` may enter and read; 0700 without a group."""
    if gid is None or os.geteuid() != 0:
        return _ensure_dir(path, PRIVATE_DIR_MODE)
    return _ensure_dir(path, SHARED_DIR_MODE, gid)


def share_file(path: Path, gid: int | None, writable: bool = False) -> None:
    """``path`` readable (and ``writable``) by group ``gid`` (0640 / 0660), or by this process's user
    alone (0600)."""
    if gid is None or os.geteuid() != 0:
        os.chmod(path, PRIVATE_FILE_MODE)
        return
    os.chown(path, -1, gid)
    os.chmod(path, SHARED_FILE_MODE | (0o020 if writable else 0))


QEMU_USERS = ("libvirt-qemu", "qemu")  # libvirt's QEMU user: Debian's, then Fedora's and upstream's


def qemu_gid() -> int | None:
    """The group of the user libvirt runs QEMU as, or None on a host without one."""
    for name in QEMU_USERS:
        found = account(name)
        if found is not None:
            return found[1]
    return None


def private_file(path: Path) -> Path:
    """Create ``path`` empty with mode 0600 when missing, and take other users' access away."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    with contextlib.suppress(PermissionError):
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o700)
    return path


def write_private(path: Path, text: str | bytes) -> None:
    """Replace ``path`` atomically with ``text`` (or bytes), mode 0600 from the start."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_or_create_private(path: Path, make) -> str:
    """The text of ``path``; when missing, ``make()``'s text written there first, mode 0600 from the
    start. Two processes creating it at once agree: the first link wins, the other reads it."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(make())
            try:
                os.link(tmp, path)  # atomic, and never replaces what another process wrote first
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text()


def reachable_by(path: Path, uid: int, gids: set[int]) -> bool:
    """Whether user ``uid`` (in groups ``gids``) may pass through every directory down to ``path``."""
    path = Path(path).resolve()
    for d in [*reversed(path.parents), path]:
        try:
            st = d.stat()
        except FileNotFoundError:
            return True  # created later by us, with the modes above
        if uid == 0:
            continue
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid in gids:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True
