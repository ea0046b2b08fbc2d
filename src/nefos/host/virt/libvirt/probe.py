"""Is libvirt usable here, and does KVM really work? (``virt_type = auto``)

KVM is used only when a guest really boots under it: on these machines
``/dev/kvm`` exists, but under nested virtualisation a KVM guest hangs or
dies at boot (``KVM internal error ... emulation failure``). The probe boots
the tiny guest's kernel with ``-accel kvm`` straight from QEMU and waits for
its init to print ``NEFOS-BOOT``; the answer is cached per machine
(``/var/tmp/nefos-kvm-probe.json``, keyed by host kernel, QEMU and guest
kernel) so it is paid once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

LOG = logging.getLogger(__name__)

PROBE_CACHE = Path(os.environ.get("NEFOS_KVM_PROBE_CACHE", "/var/tmp/nefos-kvm-probe.json"))
PROBE_TIMEOUT = 8.0  # a working KVM boots the tiny guest to its init in well under a second
QEMU = "qemu-system-x86_64"


def kvm_device_usable() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def _cache_key(kernel: Path) -> str:
    qemu = shutil.which(QEMU) or ""
    parts = [platform.release(), qemu, str(Path(qemu).stat().st_mtime if qemu else ""),
             kernel.name, str(kernel.stat().st_size)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


async def kvm_works(work_dir: Path | None = None) -> tuple[bool, str]:
    """(works, why): boot the tiny guest's kernel under KVM and wait for its init."""
    if not kvm_device_usable():
        return False, "/dev/kvm cannot be opened"
    if shutil.which(QEMU) is None:
        return False, f"{QEMU} is not installed"
    from nefos.guest.build import GuestImageUnavailable, build
    tmp = Path(tempfile.mkdtemp(prefix="nefos-kvm-probe-", dir=work_dir))
    try:
        try:
            image = await asyncio.to_thread(build, tmp / "image")
        except GuestImageUnavailable as exc:
            return False, f"cannot build the probe guest ({exc})"
        key = _cache_key(image.kernel)
        with contextlib.suppress(OSError, ValueError):
            cached = json.loads(PROBE_CACHE.read_text())
            if cached.get("key") == key:
                return bool(cached["kvm"]), cached.get("why", "") + " (cached)"
        works, why = await _boot(image, tmp)
        with contextlib.suppress(OSError):
            PROBE_CACHE.write_text(json.dumps({"key": key, "kvm": works, "why": why, "at": time.time()}))
        return works, why
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _boot(image, tmp: Path) -> tuple[bool, str]:
    console = tmp / "console.log"
    proc = await asyncio.create_subprocess_exec(
        QEMU, "-accel", "kvm", "-m", "128", "-nodefaults", "-display", "none", "-no-reboot",
        "-serial", f"file:{console}", "-kernel", str(image.kernel), "-initrd", str(image.ramdisk),
        "-append", "console=ttyS0 panic=-1", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    deadline = time.monotonic() + PROBE_TIMEOUT
    stderr = b""
    try:
        while time.monotonic() < deadline:
            if console.exists() and b"NEFOS-BOOT" in console.read_bytes():
                return True, "a KVM guest booted"
            if proc.returncode is not None:
                break
            try:
                await asyncio.wait_for(proc.wait(), 0.2)
            except asyncio.TimeoutError:
                pass
        if proc.returncode is not None and proc.stderr is not None:
            stderr = await proc.stderr.read()
        text = stderr.decode(errors="replace")
        if "KVM internal error" in text:
            return False, "KVM internal error (emulation failure) at boot"
        return False, f"a KVM guest did not boot within {PROBE_TIMEOUT:g} s"
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def libvirt_usable(uri: str = "qemu:///system") -> tuple[bool, str]:
    """(usable, why): libvirt-python imports and a connection to ``uri`` opens."""
    try:
        import libvirt
    except ImportError:
        return False, "libvirt-python is not installed (pip install 'nefos[libvirt]')"
    from nefos.host.virt.libvirt import events
    try:
        events.ensure_event_loop()
        conn = await asyncio.to_thread(libvirt.open, uri)
    except Exception as exc:
        return False, f"cannot connect to {uri}: {str(exc).strip()}"
    try:
        version = await asyncio.to_thread(conn.getVersion)
    except Exception as exc:
        return False, f"{uri} does not answer: {str(exc).strip()}"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(conn.close)
    major, minor, micro = version // 1000000, version // 1000 % 1000, version % 1000
    return True, f"libvirt at {uri} (QEMU {major}.{minor}.{micro})"


async def choose_compute_driver(cfg, requested: str | None) -> tuple[str, str]:
    """(driver, why) for ``nefos up --driver fake|libvirt|auto``.

    ``None`` (no --driver): the configured ``compute_driver`` when the config
    file or environment set one, else ``auto``. ``auto``: libvirt when it is
    usable, the fake driver otherwise. ``libvirt`` when it is not usable
    raises ``RuntimeError`` with the reason.
    """
    if requested is None:
        if "compute_driver" in cfg.model_fields_set:
            return cfg.compute_driver, "compute_driver from the configuration"
        requested = "auto"
    requested = requested.lower()
    if requested == "fake":
        return "fake", "--driver fake"
    if requested not in ("auto", "libvirt"):
        raise RuntimeError(f"--driver must be fake, libvirt or auto, not {requested!r}")
    usable, why = await libvirt_usable(cfg.connection_uri)
    if usable:
        return "libvirt", why
    if requested == "libvirt":
        raise RuntimeError(f"libvirt is not usable: {why}")
    return "fake", f"libvirt is not usable ({why})"
