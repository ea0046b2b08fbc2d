"""Rescue and unrescue of a libvirt guest (Nova's ``LibvirtDriver.rescue``/``unrescue``).

Rescue keeps the guest's domain definition in ``unrescue.xml`` (Nova's name) in the instance's
directory, writes ``disk.rescue`` from the rescue image and redefines the domain from the saved one
with that disk added: as the first disk (``vda``, the guest's own disks moved one letter on), or,
for a stable rescue (the image's ``hw_rescue_device``/``hw_rescue_bus``), after the guest's disks,
which keep their addresses. Either way the rescue disk is the one booted (``<boot order='1'/>``).
The rescue guest gets a config drive of its own, ``disk.config.rescue`` (Nova's name), in the
config drive's slot (the guest's own drive, if any, is left out): the rescue answer's password as
``admin_pass`` (none when no password was answered nor given), the key pair and the rest of the
server's metadata. Nova builds it only for a server with a config drive; Nefos always does, so the
password shown reaches the rescue guest whichever way the server configures itself (the metadata
service would serve the server's own, at most once).
Unrescue redefines the saved domain, starts it and removes the rescue files. A rescue that fails
once the domain was redefined puts the saved definition back.
"""

from __future__ import annotations

import asyncio
import contextlib
import xml.etree.ElementTree as ET
from pathlib import Path

from nefos import exceptions, fileperms
from nefos.model import admin_password
from nefos.host.virt import configdrive
from nefos.host.virt.libvirt import config as vconfig, qemu_user

UNRESCUE_XML = "unrescue.xml"
RESCUE_DISK = "disk.rescue"
RESCUE_CONFIG_DRIVE = configdrive.FILE_NAME + ".rescue"
_PREFIX = {"virtio": "vd", "scsi": "sd", "usb": "sd", "sata": "sd", "ide": "hd"}
_IDE_CONFIG_DRIVE = "hdd"  # the config drive's slot (driver.CONFIG_DRIVE_TARGET)


def _next_target(prefix: str, used: set[str]) -> str:
    for letter in "abcdefghijklmnopqrstuvwxyz":
        name = f"{prefix}{letter}"
        if name not in used and name != _IDE_CONFIG_DRIVE:
            used.add(name)
            return name
    raise exceptions.NefosError("no free disk target for the rescue disk")


def rescue_domain_xml(xml: str, rescue_path: str, driver_type: str, bus: str | None = None,
                      device: str | None = None, config_drive: str | None = None) -> str:
    """The rescue domain: ``xml`` (the guest's) with the rescue disk added and booted first, and
    ``config_drive`` (when given) as its config drive instead of the guest's."""
    ET.register_namespace("nefos", vconfig.NEFOS_NS)
    root = ET.fromstring(xml)
    devices = root.find("devices")
    os_ = root.find("os")
    for boot in (os_.findall("boot") if os_ is not None else []):
        os_.remove(boot)  # per-device boot order and <os><boot> exclude each other
    disks = devices.findall("disk")
    for disk in disks:
        for boot in disk.findall("boot"):
            disk.remove(boot)
    stable = bool(bus or device)
    bus = (bus or "virtio") if stable else "virtio"
    device = (device or "disk") if stable else "disk"
    used = {t.get("dev") for d in disks if (t := d.find("target")) is not None}
    if not stable:
        # Nova's layout: the rescue disk is vda, the guest's virtio disks follow in their order.
        shifted: set[str] = {"vda"}
        for disk in disks:
            target = disk.find("target")
            if target is not None and target.get("bus") == "virtio":
                target.set("dev", _next_target("vd", shifted))
                address = disk.find("address")
                if address is not None:
                    disk.remove(address)
        used = shifted | {t.get("dev") for d in disks if (t := d.find("target")) is not None}
        target_dev = "vda"
    else:
        target_dev = _next_target(_PREFIX.get(bus, "vd"), used)
    rescue = ET.Element("disk", type="file", device=device)
    ET.SubElement(rescue, "driver", name="qemu", type=driver_type)
    ET.SubElement(rescue, "source", file=rescue_path)
    ET.SubElement(rescue, "target", dev=target_dev, bus=bus)
    ET.SubElement(rescue, "boot", order="1")
    if device == "cdrom":
        ET.SubElement(rescue, "readonly")
    if bus == "scsi" and not any(c.get("type") == "scsi" for c in devices.findall("controller")):
        devices.insert(0, ET.Element("controller", type="scsi", index="0", model="virtio-scsi"))
    position = list(devices).index(disks[0]) if (disks and not stable) else (
        list(devices).index(disks[-1]) + 1 if disks else 0)
    devices.insert(position, rescue)
    if config_drive is not None:
        drive = vconfig.disk_element(vconfig.Disk(config_drive, _IDE_CONFIG_DRIVE, "raw", bus="ide",
                                                  device="cdrom", readonly=True))
        own = next((d for d in devices.findall("disk")
                    if (t := d.find("target")) is not None and t.get("dev") == _IDE_CONFIG_DRIVE), None)
        if own is not None:
            devices.remove(own)
        devices.insert(list(devices).index(devices.findall("disk")[-1]) + 1, drive)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


async def rescue(driver, instance: dict, network_info: list[dict], image_meta: dict,
                 rescue_password: str | None) -> None:
    uuid = instance["uuid"]
    inst_dir: Path = driver.instance_dir(uuid)
    saved = inst_dir / UNRESCUE_XML
    dom = await driver.lookup_domain(uuid)
    if await driver.is_active(dom):
        await driver.hard_stop(dom)
    if not saved.exists():  # a retried rescue keeps the first, true original
        fileperms.write_private(saved, (await driver._host.call(dom.XMLDesc, 0)).encode())
    user = await driver.prepare_for_qemu()
    disk = inst_dir / RESCUE_DISK
    fmt = await driver.image_cache.create_root_disk(image_meta["id"], image_meta.get("disk_format"), disk,
                                                    int(instance.get("root_gb") or 0))
    qemu_user.hand_over(disk, user)
    rescued = {**instance, "system_metadata": admin_password.kept(instance.get("system_metadata"), rescue_password)}
    drive = configdrive.write(inst_dir / RESCUE_CONFIG_DRIVE,
                              await asyncio.to_thread(configdrive.build, rescued, driver.cfg, network_info))
    fileperms.share_file(drive, user.gid)  # as the guest's own drive: QEMU's group reads it
    props = image_meta.get("properties") or {}
    xml = rescue_domain_xml(saved.read_text(), str(disk), fmt, props.get("hw_rescue_bus"),
                            props.get("hw_rescue_device"), config_drive=str(drive))
    conn = driver._host.get_connection()
    try:
        dom = await driver._host.call(conn.defineXML, xml)
        await driver.start_domain(dom, uuid, network_info)
    except BaseException:
        with contextlib.suppress(Exception):
            await driver._host.call(conn.defineXML, saved.read_text())
        raise


async def unrescue(driver, instance: dict, network_info: list[dict]) -> None:
    uuid = instance["uuid"]
    inst_dir: Path = driver.instance_dir(uuid)
    saved = inst_dir / UNRESCUE_XML
    if not saved.exists():
        raise exceptions.NefosError(f"instance {uuid}: no saved domain to unrescue to")
    dom = await driver.lookup_domain(uuid)
    if await driver.is_active(dom):
        await driver.hard_stop(dom)
    dom = await driver._host.call(driver._host.get_connection().defineXML, saved.read_text())
    await driver.start_domain(dom, uuid, network_info)
    saved.unlink()
    (inst_dir / RESCUE_DISK).unlink(missing_ok=True)
    (inst_dir / RESCUE_CONFIG_DRIVE).unlink(missing_ok=True)
