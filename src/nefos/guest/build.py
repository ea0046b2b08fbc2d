"""Build the tiny guest: Debian's cloud kernel plus a busybox initramfs with an SSH server.

The initramfs (a gzip'ed newc cpio archive, written here in Python) holds
``busybox-static`` with a link per applet, an ``lsblk`` script (busybox has none),
``dropbear`` (``dropbear-bin``) with the shared libraries ``ldd`` names and the dynamic loader,
the few kernel modules the guest needs from the
same kernel (virtio PCI + virtio-net for its NIC, virtio-blk for its disks, the ACPI button +
evdev so busybox ``acpid`` sees the power button, ata_piix + sr_mod + isofs for a config drive on
the IDE CD-ROM) and the init of ``nefos.guest.init``:

* busybox ``init`` runs ``/etc/init.d/rcS``: mounts proc, sys, devtmpfs, devpts,
  loads the modules, prints ``NEFOS-BOOT: ...`` and what it sees of its root
  disk (``NEFOS-DISK: vda <sectors> sectors <sha256 of MiB 0-3> <of MiB
  4-7>``) to the console, starts
  ``acpid`` (power button -> ``poweroff``), brings ``lo`` up, listens for kernel uevents (busybox
  ``uevent``) and brings every ``ethN`` up, present at boot or hot-plugged later, with a
  ``udhcpc`` of its own in the background (``NEFOS-NET: ethN added|removed`` for a hot-plugged
  one);
* udhcpc's script configures the lease (and, from eth0's, the default route, classless static
  routes and DNS) and prints ``NEFOS-IP: <addr>/<prefix> on <ethN> (router ...)`` to the serial
  console; while it has none, ``NEFOS-DHCP: no lease on <ethN>`` after every 3 unanswered
  DISCOVERs (one a second, 1 s pause between rounds);
* in the background, the guest configures itself: from its config drive (the block device
  labelled ``config-2``, mounted read-only) or, without one, once it has a lease, from the
  metadata service (``http://169.254.169.254/openstack/latest/``, a few tries). It sets its
  hostname (the first label of ``hostname``), writes the ``public_keys`` to
  ``/root/.ssh/authorized_keys`` (0600), starts dropbear on port 22 once the network is up
  (keys only; host keys made at the first connection) and prints ``NEFOS-SSH: dropbear
  listening on 22``, sets root's password from ``admin_pass`` (a SHA-512 crypt hash in
  ``/etc/shadow``), runs ``user_data`` when it starts with ``#!`` (output on the console), and
  prints ``NEFOS-CONFIG: source=<config-drive|metadata|none> uuid=<uuid> hostname=<name>
  keys=<n> user-data=<ran|none|skipped> root-password=<set|unchanged|failed>``;
* ``poweroff`` (from acpid or a user) goes through busybox init, which powers
  the machine off (ACPI), so the domain stops.

Nothing is downloaded: the inputs are files Debian packages installed.
The result is cached: the output names carry a hash of the inputs (the init, the module list,
and the size and mtime of the kernel, busybox, dropbear and its libraries). The archive itself
is deterministic (fixed inode order, no timestamps).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nefos.guest.init import CONFIG_SCRIPT, INITTAB, LSBLK, NIC_SCRIPT, POWER_BUTTON, RCS, UDHCPC_SCRIPT

BUSYBOX = "/bin/busybox"  # busybox-static
DROPBEAR = "/usr/sbin/dropbear"  # dropbear-bin
# Plus their dependencies; ata_piix before sr_mod: the config drive's IDE CD-ROM is there when
# sr_mod binds (a module's insmod returns after the asynchronous probes it started).
MODULES = ["virtio_net", "virtio_blk", "virtio_pci", "button", "evdev", "ata_piix", "sr_mod", "isofs"]
VERSION = "4"  # bump when the init changes
DEFAULT_CMDLINE = "console=ttyS0 panic=-1"


@dataclass
class GuestImage:
    kernel: Path
    ramdisk: Path
    kernel_version: str
    cmdline: str = DEFAULT_CMDLINE

    def as_dict(self) -> dict:
        return {"kernel": str(self.kernel), "ramdisk": str(self.ramdisk),
                "kernel_version": self.kernel_version, "cmdline": self.cmdline}


class GuestImageUnavailable(RuntimeError):
    """The Debian packages the guest is built from are not installed."""


def find_kernel() -> tuple[Path, str]:
    """Debian's cloud kernel (``/boot/vmlinuz-*-cloud-amd64``), newest first; its version."""
    candidates = sorted(glob.glob("/boot/vmlinuz-*-cloud-amd64"), key=_version_key, reverse=True)
    for path in candidates:
        version = Path(path).name[len("vmlinuz-"):]
        if Path(f"/lib/modules/{version}").is_dir():
            return Path(path), version
    raise GuestImageUnavailable("no Debian cloud kernel: apt-get install linux-image-cloud-amd64")


def _version_key(path: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.-]", Path(path).name)]


def _module_index(version: str) -> dict[str, tuple[Path, list[str]]]:
    """module name -> (file, dependencies) from the kernel's modules.dep."""
    root = Path(f"/lib/modules/{version}")
    index: dict[str, tuple[Path, list[str]]] = {}
    for line in (root / "modules.dep").read_text().splitlines():
        target, _, deps = line.partition(":")
        name = _mod_name(target)
        index[name] = (root / target, [_mod_name(d) for d in deps.split()])
    return index


def _mod_name(path: str) -> str:
    base = Path(path).name
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.replace("-", "_")


def _modules_in_order(version: str, wanted: list[str]) -> list[tuple[str, Path]]:
    """``wanted`` and their dependencies, dependencies first; built-in modules are skipped."""
    index = _module_index(version)
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        if name not in index:
            return  # built into the kernel
        path, deps = index[name]
        for dep in deps:
            visit(dep)
        order.append((name, path))

    for name in wanted:
        visit(name)
    return order


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        import lzma
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", str(path)], check=True, capture_output=True).stdout
    return data


class _Cpio:
    """A newc cpio archive writer (what the kernel unpacks as an initramfs)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        encoded = name.encode() + b"\0"
        header = "070701" + "".join(f"{v:08x}" for v in (
            self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(encoded), 0))
        self.ino += 1
        self.buf.write(header.encode() + encoded)
        self._pad()
        self.buf.write(data)
        self._pad()

    def _pad(self) -> None:
        self.buf.write(b"\0" * (-self.buf.tell() % 4))

    def dir(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | mode, nlink=2)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def _applets() -> list[str]:
    out = subprocess.run([BUSYBOX, "--list-full"], check=True, capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def shared_libraries(binary: str) -> list[Path]:
    """The shared libraries ``binary`` loads and the dynamic loader, as ``ldd`` names them (sorted)."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if m:
            found.add(Path(m.group(1)))
    return sorted(found)


def _dropbear_files() -> list[tuple[str, Path]]:
    """(path in the initramfs, file on this machine) of dropbear and what it needs to run."""
    if not Path(DROPBEAR).is_file():
        raise GuestImageUnavailable(f"no {DROPBEAR}: apt-get install dropbear-bin")
    return [(DROPBEAR.lstrip("/"), Path(DROPBEAR))] + [
        (str(lib).lstrip("/"), lib) for lib in shared_libraries(DROPBEAR)]


def build_initramfs(version: str, extra_files: dict[str, tuple[bytes, int]] | None = None) -> bytes:
    """The initramfs; ``extra_files`` (path -> (data, mode)) are added as they are, e.g. an
    ``etc/nefos-after-boot`` script the init runs once the network is being set up."""
    if not Path(BUSYBOX).is_file():
        raise GuestImageUnavailable(f"no {BUSYBOX}: apt-get install busybox-static")
    cpio = _Cpio()
    made = ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "etc/init.d", "etc/acpi", "etc/acpi/PWRF",
            "etc/dropbear", "proc", "sys", "dev", "run", "tmp", "var", "var/log", "mnt", "lib", "lib/modules"]
    for d in made:
        cpio.dir(d)
    cpio.dir("root", 0o700)
    for name, path in _dropbear_files():  # dropbear, its libraries and the loader, where ldd found them
        parts = name.split("/")
        for parent in ("/".join(parts[:depth]) for depth in range(1, len(parts))):
            if parent not in made:
                cpio.dir(parent)
                made.append(parent)
        cpio.file(name, path.read_bytes(), 0o755)
    cpio.file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
    for applet in _applets():
        if applet != "bin/busybox":
            cpio.symlink(applet, "/bin/busybox")
    cpio.symlink("init", "/bin/busybox")
    cpio.file("etc/inittab", INITTAB.encode())
    cpio.file("etc/init.d/rcS", RCS.encode(), 0o755)
    cpio.file("etc/udhcpc.script", UDHCPC_SCRIPT.encode(), 0o755)
    cpio.file("sbin/nefos-nic", NIC_SCRIPT.encode(), 0o755)
    cpio.file("etc/acpi/PWRF/00000080", POWER_BUTTON.encode(), 0o755)
    cpio.file("etc/nefos-config", CONFIG_SCRIPT.encode(), 0o644)
    cpio.file("usr/bin/lsblk", LSBLK.encode(), 0o755)
    cpio.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    cpio.file("etc/shadow", b"root:*:19000:0:99999:7:::\n", 0o600)  # no password until admin_pass sets one
    cpio.file("etc/group", b"root:x:0:\n")
    cpio.file("etc/shells", b"/bin/sh\n")
    cpio.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n")
    order = []
    for name, path in _modules_in_order(version, MODULES):
        cpio.file(f"lib/modules/{name}.ko", _module_bytes(path))
        order.append(name)
    cpio.file("etc/modules.order", ("\n".join(order) + "\n").encode())
    for name, (data, mode) in sorted((extra_files or {}).items()):
        cpio.file(name, data, mode)
    return gzip.compress(cpio.finish(), compresslevel=6, mtime=0)


def _inputs_digest(kernel: Path, version: str) -> str:
    h = hashlib.sha256()
    h.update(VERSION.encode())
    for text in (INITTAB, RCS, NIC_SCRIPT, UDHCPC_SCRIPT, POWER_BUTTON, CONFIG_SCRIPT, LSBLK, " ".join(MODULES)):
        h.update(text.encode())
    for path in (kernel, Path(BUSYBOX), *(p for _, p in _dropbear_files())):
        st = path.stat()
        h.update(f"{path}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def build(out_dir: str | os.PathLike) -> GuestImage:
    """Build (or reuse) the kernel + initramfs pair in ``out_dir``."""
    kernel_src, version = find_kernel()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    digest = _inputs_digest(kernel_src, version)
    kernel = out / f"nefos-guest-{digest}.vmlinuz"
    ramdisk = out / f"nefos-guest-{digest}.initrd"
    manifest = out / f"nefos-guest-{digest}.json"
    if not (kernel.is_file() and ramdisk.is_file() and manifest.is_file()):
        tmp_k, tmp_r = kernel.with_suffix(".tmp-k"), ramdisk.with_suffix(".tmp-r")
        shutil.copyfile(kernel_src, tmp_k)
        tmp_r.write_bytes(build_initramfs(version))
        os.replace(tmp_k, kernel)
        os.replace(tmp_r, ramdisk)
        image = GuestImage(kernel, ramdisk, version)
        manifest.write_text(json.dumps(image.as_dict(), indent=1))
    return GuestImage(kernel, ramdisk, version)
