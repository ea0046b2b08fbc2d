"""Rescue and unrescue of a real guest: the rescue domain boots the rescue image from vda with the
guest's disk as vdb (Nova's libvirt layout); unrescue brings the guest's own domain back."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from nefos.context import admin_context
from nefos.control.image import images
from tests.libvirt.conftest import HOST, avirsh, make_network, wait_console, wait_domstate

pytestmark = pytest.mark.libvirt


def _disk_sources(xml: str) -> list[tuple[str, str]]:
    return [(d.find("target").get("dev"), (d.find("source").get("file") or "").rsplit("/", 1)[-1])
            for d in ET.fromstring(xml).findall("devices/disk") if d.get("device") == "disk"]


async def test_rescue_and_unrescue_a_real_guest(lvcloud):
    cloud = lvcloud
    driver = cloud.driver(HOST)
    net = await make_network(cloud)
    sid = (await cloud.boot(name="rescue-1", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_console(cloud, sid, "NEFOS-BOOT")
    own = _disk_sources(await avirsh("dumpxml", sid))
    assert own[0] == ("vda", "disk")

    await cloud.action(sid, {"rescue": None}, expect=200)
    server = await cloud.wait_status(sid, "RESCUE", timeout=120)
    assert server["OS-EXT-STS:power_state"] == 1
    await wait_domstate(sid, "running")
    inst_dir = driver.instances_path / sid
    assert (inst_dir / "disk.rescue").is_file() and (inst_dir / "unrescue.xml").is_file()
    assert _disk_sources(await avirsh("dumpxml", sid))[:2] == [("vda", "disk.rescue"), ("vdb", "disk")]
    await wait_console(cloud, sid, "NEFOS-BOOT", timeout=120, count=2)  # booted again, from the rescue disk

    await cloud.action(sid, {"unrescue": None})
    server = await cloud.wait_status(sid, "ACTIVE", timeout=120)
    assert server["OS-EXT-STS:power_state"] == 1
    await wait_domstate(sid, "running")
    assert _disk_sources(await avirsh("dumpxml", sid)) == own
    assert not (inst_dir / "disk.rescue").exists() and not (inst_dir / "unrescue.xml").exists()
    await wait_console(cloud, sid, "NEFOS-BOOT", timeout=120, count=3)


async def test_stable_rescue_from_an_ide_cdrom(lvcloud):
    """2.87's stable rescue: the guest's disk stays vda; the rescue image is an IDE CD-ROM, booted."""
    cloud = lvcloud
    net = await make_network(cloud)
    sid = (await cloud.boot(name="rescue-2", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_console(cloud, sid, "NEFOS-BOOT")
    image = await cloud.default_image()
    await images.update(cloud.rt, admin_context(), image, [("add", "hw_rescue_device", "cdrom"),
                                                           ("add", "hw_rescue_bus", "ide")])
    await cloud.action(sid, {"rescue": {"rescue_image_ref": image}}, expect=200)
    await cloud.wait_status(sid, "RESCUE", timeout=120)
    await wait_domstate(sid, "running")
    root = ET.fromstring(await avirsh("dumpxml", sid))
    disks = {d.find("target").get("dev"): d for d in root.findall("devices/disk")}
    assert disks["vda"].find("source").get("file").endswith("/disk")
    cdrom = next(d for d in disks.values() if d.find("source").get("file").endswith("/disk.rescue"))
    assert cdrom.get("device") == "cdrom" and cdrom.find("target").get("bus") == "ide"
    assert cdrom.find("boot").get("order") == "1"
    await cloud.action(sid, {"unrescue": None})
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_domstate(sid, "running")
