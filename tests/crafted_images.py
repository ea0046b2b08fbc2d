"""Hostile and honest image files, made with qemu-img (importable as ``tests.crafted_images``).

Each builder writes into ``directory`` and returns the image file's bytes: what a
user would upload.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

GiB = 1024 ** 3


def _qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True, timeout=60)


def qcow2(directory: Path, size: str = "1M", *options: str) -> bytes:
    """A qcow2 file of virtual ``size`` (``options``: extra ``-o`` settings)."""
    path = Path(directory) / f"plain-{size}.qcow2"
    argv = ["create", "-q", "-f", "qcow2"]
    for opt in options:
        argv += ["-o", opt]
    _qemu_img(*argv, str(path), size)
    return path.read_bytes()


def qcow2_backed_by(directory: Path, backing: str = "/etc/passwd") -> bytes:
    """A qcow2 whose backing file is ``backing`` (a host file the guest would read)."""
    path = Path(directory) / "backed.qcow2"
    _qemu_img("create", "-q", "-f", "qcow2", "-b", backing, "-F", "raw", "-u", str(path), "1M")
    return path.read_bytes()


def qcow2_with_data_file(directory: Path) -> bytes:
    """A qcow2 whose data lives in an external data file (named in its header)."""
    path = Path(directory) / "datafile.qcow2"
    _qemu_img("create", "-q", "-f", "qcow2", "-o", f"data_file={Path(directory) / 'external.raw'}",
              str(path), "1M")
    return path.read_bytes()


def vmdk_descriptor(directory: Path, extent: str = "/etc/passwd") -> bytes:
    """A VMDK text descriptor whose flat extent is the host file ``extent``."""
    return (
        "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n"
        'createType="monolithicFlat"\n\n# Extent description\n'
        f'RW 2048 FLAT "{extent}" 0\n\n# The Disk Data Base\n#DDB\n\n'
        'ddb.virtualHWVersion = "4"\nddb.geometry.cylinders = "2"\n'
        'ddb.geometry.heads = "16"\nddb.geometry.sectors = "63"\nddb.adapterType = "ide"\n'
    ).encode()


def raw_disk(size: int = 1024 * 1024, marker: bytes = b"NEFOS-LEGIT-IMAGE") -> bytes:
    """A raw disk: ``marker`` at offset 0 and at every MiB, zeros between."""
    data = bytearray(size)
    for offset in range(0, size, 1024 * 1024):
        data[offset:offset + len(marker)] = marker
    return bytes(data)
