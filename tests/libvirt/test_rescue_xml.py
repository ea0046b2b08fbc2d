"""The rescue domain's XML (no hypervisor): Nova's layout, rescue disk first, and the stable
rescue's, the guest's disks where they were and the rescue disk added on the image's bus."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from nefos.host.virt.libvirt import config as vconfig
from nefos.host.virt.libvirt.rescue import rescue_domain_xml


def _guest_xml() -> str:
    spec = vconfig.GuestSpec(
        name="instance-x", uuid="11111111-2222-3333-4444-555555555555", virt_type="qemu", memory_mb=128,
        vcpus=1, console_log="/i/console.log",
        disks=[vconfig.Disk("/i/disk", "vda"), vconfig.Disk("/i/disk.eph0", "vdb"),
               vconfig.Disk("/i/disk.config", "hdd", "raw", bus="ide", device="cdrom", readonly=True)],
        vifs=[vconfig.Vif("port-1", "fa:16:3e:00:00:01", "brqnet", "tapport-1")])
    xml = vconfig.domain_xml(spec)
    # libvirt's XMLDesc adds addresses: the rescue domain must not keep the old disks' slots.
    return xml.replace('<target dev="vda" bus="virtio" />',
                       '<target dev="vda" bus="virtio" /><address type="pci" bus="0x00" slot="0x04" />')


def _disks(xml: str) -> list[tuple[str, str, str, str, str | None]]:
    root = ET.fromstring(xml)
    return [(d.find("source").get("file"), d.find("target").get("dev"), d.find("target").get("bus"),
             d.get("device"), d.find("boot").get("order") if d.find("boot") is not None else None)
            for d in root.findall("devices/disk")]


def test_nova_layout_boots_the_rescue_disk_first():
    xml = rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "qcow2")
    assert _disks(xml) == [("/i/disk.rescue", "vda", "virtio", "disk", "1"),
                           ("/i/disk", "vdb", "virtio", "disk", None),
                           ("/i/disk.eph0", "vdc", "virtio", "disk", None),
                           ("/i/disk.config", "hdd", "ide", "cdrom", None)]
    root = ET.fromstring(xml)
    assert root.find("os/boot") is None  # per-device boot order instead
    assert root.find("devices/disk[2]/address") is None
    assert vconfig.ports_from_xml(xml) == vconfig.ports_from_xml(_guest_xml())  # same ports, same metadata


def test_stable_rescue_keeps_the_guest_disks_and_adds_the_rescue_disk_last():
    xml = rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "qcow2", bus="virtio", device="disk")
    assert _disks(xml) == [("/i/disk", "vda", "virtio", "disk", None),
                           ("/i/disk.eph0", "vdb", "virtio", "disk", None),
                           ("/i/disk.config", "hdd", "ide", "cdrom", None),
                           ("/i/disk.rescue", "vdc", "virtio", "disk", "1")]
    assert ET.fromstring(xml).find("devices/disk[1]/address") is not None
    usb = _disks(rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "raw", bus="usb"))[-1]
    assert usb == ("/i/disk.rescue", "sda", "usb", "disk", "1")
    scsi = rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "raw", bus="scsi", device="disk")
    assert _disks(scsi)[-1][1:3] == ("sda", "scsi")
    assert ET.fromstring(scsi).find("devices/controller[@type='scsi']").get("model") == "virtio-scsi"
    cdrom = rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "raw", bus="ide", device="cdrom")
    assert _disks(cdrom)[-1] == ("/i/disk.rescue", "hda", "ide", "cdrom", "1")  # hdd is the config drive's
    assert ET.fromstring(cdrom).find("devices/disk[last()]/readonly") is not None


def test_the_rescue_guest_gets_its_own_config_drive_in_the_config_drive_s_slot():
    """In place of the guest's drive (which the rescue guest never sees), or added where there was none."""
    xml = rescue_domain_xml(_guest_xml(), "/i/disk.rescue", "qcow2", config_drive="/i/disk.config.rescue")
    assert _disks(xml) == [("/i/disk.rescue", "vda", "virtio", "disk", "1"),
                           ("/i/disk", "vdb", "virtio", "disk", None),
                           ("/i/disk.eph0", "vdc", "virtio", "disk", None),
                           ("/i/disk.config.rescue", "hdd", "ide", "cdrom", None)]
    assert ET.fromstring(xml).find("devices/disk[4]/readonly") is not None
    without = ET.fromstring(_guest_xml())
    devices = without.find("devices")
    devices.remove(devices.findall("disk")[-1])
    xml = rescue_domain_xml(ET.tostring(without, encoding="unicode"), "/i/disk.rescue", "qcow2",
                            bus="ide", device="cdrom", config_drive="/i/disk.config.rescue")
    assert _disks(xml) == [("/i/disk", "vda", "virtio", "disk", None),
                           ("/i/disk.eph0", "vdb", "virtio", "disk", None),
                           ("/i/disk.rescue", "hda", "ide", "cdrom", "1"),
                           ("/i/disk.config.rescue", "hdd", "ide", "cdrom", None)]
