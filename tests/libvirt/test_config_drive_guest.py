"""A real guest with a config drive: the domain has it as a read-only CD-ROM, QEMU's group reads it."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nefos.host.virt import configdrive
from nefos.host.virt.libvirt import qemu_user
from tests.libvirt.conftest import HOST, avirsh, make_network, wait_domstate

pytestmark = pytest.mark.libvirt


async def test_a_guest_boots_with_its_config_drive_as_a_read_only_cdrom(lvcloud):
    cloud = lvcloud
    net = await make_network(cloud, name="cd-net", cidr="10.78.0.0/24")
    sid = (await cloud.boot(name="cd-guest", flavor="42", networks=[{"uuid": net["id"]}], config_drive=True,
                            metadata={"k": "v"}))["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE", timeout=120)
    await wait_domstate(sid, "running")

    root = ET.fromstring(await avirsh("dumpxml", sid))
    (cdrom,) = root.findall("./devices/disk[@device='cdrom']")
    path = Path(cdrom.find("source").get("file"))
    assert path == cloud.driver(HOST).instances_path / sid / configdrive.FILE_NAME
    assert cdrom.find("readonly") is not None
    assert cdrom.find("target").get("bus") == "ide" and cdrom.find("driver").get("type") == "raw"
    assert root.find("./os/type").get("machine", "pc").startswith("pc")  # i440fx: IDE is there

    st = path.stat()  # 0640 for QEMU's group (libvirt relabels it to QEMU's user while the guest runs)
    user = qemu_user.from_capabilities(await avirsh("capabilities"), "qemu")
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, user.gid)
    files = configdrive.read_files(path.read_bytes())
    assert files[""] == b"config-2"
    md = json.loads(files["openstack/latest/meta_data.json"])
    assert (md["uuid"], md["meta"]) == (sid, {"k": "v"})

    # Without asking: no CD-ROM.
    other = (await cloud.boot(name="plain-guest", flavor="42", networks=[{"uuid": net["id"]}]))["server"]["id"]
    await cloud.wait_status(other, "ACTIVE", timeout=120)
    assert not ET.fromstring(await avirsh("dumpxml", other)).findall("./devices/disk[@device='cdrom']")
    assert not os.path.exists(cloud.driver(HOST).instances_path / other / configdrive.FILE_NAME)
