"""Config drives (Nova's ``nova.virt.configdrive``): the instance's metadata on a small ISO 9660 disk.

A guest gets one when its server was created with ``config_drive: true``, when its image says
``img_config_drive=mandatory``, or when the operator sets ``force_config_drive`` (``required_by``).
The volume is labelled ``config-2`` (what cloud-init's ConfigDrive source looks for) and holds
what the metadata service would answer, rendered by the same code
(``nefos.model.instance_metadata``): ``openstack/<version>/`` (meta_data.json, user_data when
given, vendor_data.json, network_data.json, vendor_data2.json) for every version and ``latest``, and
``ec2/<version>/meta-data.json`` (and ``user-data``) for 2009-04-04 and ``latest``.

The image is built in Python (pycdlib) with Rock Ridge and Joliet names, as Nova's ``genisoimage
-r -J`` call makes it; nothing is shelled out. The file is written with mode 0600 from the start
(``write``); a driver that hands it to another user (QEMU's group) widens it itself.
"""

from __future__ import annotations

import io
from pathlib import Path

import pycdlib

from nefos import fileperms
from nefos.model.instance_metadata import InstanceMetadata

VOLUME_LABEL = "config-2"
FILE_NAME = "disk.config"  # in the instance's directory, as Nova's libvirt driver names it


def required_by(instance: dict, cfg, image_meta: dict | None = None) -> bool:
    """Whether ``instance`` gets a config drive (Nova's ``configdrive.required_by``)."""
    asked = str(instance.get("config_drive") or "").strip().lower() not in ("", "false", "0", "none")
    props = (image_meta or {}).get("properties") or {}
    return asked or bool(cfg.force_config_drive) or props.get("img_config_drive") == "mandatory"


def metadata_of(instance: dict, cfg, network_info: list[dict] | None) -> InstanceMetadata:
    return InstanceMetadata(instance, network_info=network_info, dhcp_domain=cfg.dhcp_domain,
                            default_availability_zone=cfg.default_availability_zone)


def make_iso(files: list[tuple[str, bytes]]) -> bytes:
    """An ISO 9660 image labelled ``config-2`` (Rock Ridge 1.09, Joliet) holding ``files``
    ((relative path, content) pairs)."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=4, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL,
            pub_ident_str="Nefos")
    made: set[str] = set()
    try:
        for rel, content in files:
            parts = rel.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/" + "/".join(parts[:depth])
                if directory not in made:
                    iso.add_directory(directory, rr_name=parts[depth - 1], joliet_path=directory)
                    made.add(directory)
            path = "/" + "/".join(parts)
            iso.add_fp(io.BytesIO(content), len(content), path, rr_name=parts[-1], joliet_path=path)
        out = io.BytesIO()
        iso.write_fp(out)
    finally:
        iso.close()
    return out.getvalue()


def build(instance: dict, cfg, network_info: list[dict] | None) -> bytes:
    """The config drive image of ``instance``."""
    return make_iso(metadata_of(instance, cfg, network_info).config_drive_files())


def write(path: Path, image: bytes) -> Path:
    """``image`` at ``path``, replaced atomically, mode 0600 from the start."""
    fileperms.write_private(path, image)
    return Path(path)


def read_files(image: bytes) -> dict[str, bytes]:
    """Every file of a config drive image by its Rock Ridge path (without the leading ``/``), and
    its volume label under ``""`` — for checks and tests."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        found: dict[str, bytes] = {"": iso.pvd.volume_identifier.decode().strip().encode()}
        for root, _dirs, names in iso.walk(rr_path="/"):
            for name in names:
                path = f"{root.rstrip('/')}/{name}"
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, rr_path=path)
                found[path.lstrip("/")] = out.getvalue()
    finally:
        iso.close()
    return found
