"""QEMU never runs as root: who it runs as, and the instance files made reachable by it.

libvirt's DAC security driver runs every guest as qemu.conf's ``user``/``group``
(Debian: ``libvirt-qemu``) and, with ``dynamic_ownership`` on (the default),
hands a guest's disks, kernel and ramdisk to that user while it runs. Nefos
reads that identity from the capabilities' DAC base label and:

* refuses to start the compute host when it is root (``user = "root"``): a
  root QEMU opens any host file a disk or kernel names;
* makes ``instances_path`` and its ``_base`` image cache ``0750``, group the
  QEMU group (owner unchanged), and gives the QEMU group traversal (``g+x``,
  no listing) of the directories between ``instances_path`` and the state
  directory, which another service may keep ``0700``;
* refuses to start when a directory above that (outside Nefos's state) is
  closed to QEMU, saying which one and how to open it;
* hands each guest's own disk files to the QEMU user, so guests run even with
  ``dynamic_ownership = 0``.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import stat
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from nefos import exceptions

LOG = logging.getLogger(__name__)

DIR_MODE = 0o750
QEMU_CONF = "/etc/libvirt/qemu.conf"
SETUP_HINT = "scripts/setup-libvirt.sh sets this up"


@dataclass(frozen=True)
class QemuUser:
    uid: int
    gid: int

    def __str__(self) -> str:
        return f"{_user_name(self.uid)}:{_group_name(self.gid)}"

    def can_traverse(self, st: os.stat_result) -> bool:
        if self.uid == st.st_uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid == self.gid or st.st_gid in _supplementary_gids(self.uid):
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _supplementary_gids(uid: int) -> set[int]:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return set()
    return {g.gr_gid for g in grp.getgrall() if name in g.gr_mem}


def from_capabilities(caps_xml: str, virt_type: str) -> QemuUser:
    """The user:group libvirt runs ``virt_type`` guests as (its DAC base label); refuses root."""
    label = None
    for model in ET.fromstring(caps_xml).iter("secmodel"):
        if (model.findtext("model") or "") != "dac":
            continue
        for base in model.findall("baselabel"):
            if base.get("type") == virt_type or label is None:
                label = (base.text or "").strip()
    if not label:
        raise exceptions.HostConfigurationError(
            reason="libvirt reports no DAC security label for QEMU guests, so Nefos cannot tell which user "
                   f"QEMU runs as. Keep libvirt's DAC security driver on in {QEMU_CONF} ({SETUP_HINT}).")
    try:
        uid, gid = (int(part.lstrip("+")) for part in label.split(":", 1))
    except ValueError:
        raise exceptions.HostConfigurationError(reason=f"libvirt's DAC label {label!r} is not +uid:+gid")
    if uid == 0:
        raise exceptions.HostConfigurationError(
            reason=f'libvirt runs QEMU as root (user = "root" in {QEMU_CONF}): a guest\'s disk or kernel '
                   'could then name any host file. Set user = "libvirt-qemu" and group = "libvirt-qemu" '
                   f"(Debian's defaults: remove the user/group lines) and restart libvirtd ({SETUP_HINT}).")
    return QemuUser(uid, gid)


def prepare_instances_path(instances_path: Path, state_dir: Path, user: QemuUser) -> None:
    """``instances_path`` and ``_base`` reachable by QEMU (see the module's docstring)."""
    for path in (instances_path, instances_path / "_base"):
        path.mkdir(parents=True, exist_ok=True)
        share_dir(path, user)
    state_dir = state_dir.resolve()
    for parent in instances_path.parents:
        st = parent.stat()
        if user.can_traverse(st):
            continue
        if parent == state_dir or state_dir in parent.parents:
            # Nefos's own directory: QEMU's group may pass through it, not list it.
            os.chown(parent, -1, user.gid)
            os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXGRP)
            LOG.info("%s: group %s may traverse it (QEMU reaches %s)", parent, _group_name(user.gid),
                     instances_path)
            continue
        raise exceptions.HostConfigurationError(
            reason=f"QEMU runs as {user} and cannot reach instances_path {instances_path}: {parent} is mode "
                   f"{stat.S_IMODE(st.st_mode):04o}, owned by {_user_name(st.st_uid)}:{_group_name(st.st_gid)}. "
                   f"Let it through: chgrp {_group_name(user.gid)} {parent} && chmod g+x {parent} "
                   f"(or chmod o+x {parent}), or set instances_path to a directory QEMU can reach.")


def share_dir(path: Path, user: QemuUser) -> None:
    """``path`` (a directory of Nefos's) mode 0750, group QEMU's."""
    os.chown(path, -1, user.gid)
    os.chmod(path, DIR_MODE)


def hand_over(path: Path, user: QemuUser) -> None:
    """A guest's own disk file, owned by the QEMU user (libvirt's relabelling may be off)."""
    os.chown(path, user.uid, user.gid)
