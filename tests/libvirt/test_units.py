"""The pieces without a hypervisor: domain XML, the guest's initramfs."""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nefos import exceptions
from nefos.guest import build
from nefos.guest.build import DROPBEAR, build_initramfs, shared_libraries
from nefos.guest.init import LSBLK
from nefos.host.virt.libvirt import config as vconfig, qemu_user


def test_domain_xml():
    spec = vconfig.GuestSpec(
        name="instance-x", uuid="11111111-2222-3333-4444-555555555555", virt_type="qemu", memory_mb=128,
        vcpus=2, console_log="/i/console.log", kernel="/b/k", ramdisk="/b/r", cmdline="console=ttyS0",
        disks=[vconfig.Disk("/i/disk", "vda"), vconfig.Disk("/i/disk.eph0", "vdb")],
        vifs=[vconfig.Vif("port-1", "fa:16:3e:00:00:01", "brqnet", "tapport-1", mtu=1450)],
        display_name="vm", flavor_name="m1.nano")
    xml = vconfig.domain_xml(spec)
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu"
    assert root.find("memory").text == "128" and root.find("vcpu").text == "2"
    assert root.find("features/acpi") is not None  # a guest's poweroff must stop the domain
    # TCG: qemu64 with RDRAND, so the guest's random pool is ready at boot (SSH does not wait for it)
    cpu = root.find("cpu")
    assert cpu.get("mode") == "custom" and cpu.find("model").text == "qemu64"
    assert [(f.get("name"), f.get("policy")) for f in cpu.findall("feature")] == [("rdrand", "require")]
    kvm = ET.fromstring(vconfig.domain_xml(vconfig.GuestSpec(name="k", uuid="u", virt_type="kvm", memory_mb=64,
                                                             vcpus=1, console_log="/c")))
    assert kvm.find("cpu").get("mode") == "host-passthrough" and kvm.find("cpu/feature") is None
    assert root.find("os/kernel").text == "/b/k" and root.find("os/cmdline").text == "console=ttyS0"
    assert [d.get("dev") for d in root.findall("devices/disk/target")] == ["vda", "vdb"]
    iface = root.find("devices/interface")
    # A tap on no bridge: the host's L2 agent wires it (no agent, no traffic).
    assert iface.get("type") == "ethernet" and iface.find("source") is None
    assert iface.find("mac").get("address") == "fa:16:3e:00:00:01"
    assert iface.find("target").get("dev") == "tapport-1" and iface.find("mtu").get("size") == "1450"
    # The serial console is logged by virtlogd (bounded by its max_size), not a file QEMU grows.
    serial = root.find("devices/serial")
    assert serial.get("type") == "pty" and serial.find("source") is None
    assert serial.find("log").get("file") == "/i/console.log" and serial.find("log").get("append") == "on"
    assert root.find("devices/console").get("type") == "pty"
    assert root.find("devices/console/target").get("type") == "serial"
    assert root.find("seclabel") is None  # libvirt's DAC driver: QEMU as its user, files relabelled
    assert root.find("on_poweroff").text == "destroy"
    assert vconfig.ports_from_xml(xml) == [{"id": "port-1", "devname": "tapport-1", "mac": "fa:16:3e:00:00:01",
                                            "bridge": "brqnet"}]
    assert vconfig.disks_from_xml(xml) == ["/i/disk", "/i/disk.eph0"]
    assert vconfig.bridges_of_bridge_interfaces(xml) == set()
    legacy = xml.replace('<interface type="ethernet">', '<interface type="bridge"><source bridge="brqold" />')
    assert vconfig.bridges_of_bridge_interfaces(legacy) == {"brqold"}


def test_vnc_display():
    """With [vnc] enabled the guest gets QEMU's VNC display on the listen address, its port picked
    at start (autoport); the live XML says which, the inactive one says -1 (no QEMU process)."""
    spec = vconfig.GuestSpec(name="v", uuid="u", virt_type="qemu", memory_mb=64, vcpus=1, console_log="/c",
                             vnc_listen="127.0.0.1")
    xml = vconfig.domain_xml(spec)
    graphics = ET.fromstring(xml).find("devices/graphics")
    assert (graphics.get("type"), graphics.get("autoport"), graphics.get("listen")) == ("vnc", "yes", "127.0.0.1")
    assert vconfig.vnc_port(xml) is None  # not started
    live = xml.replace('autoport="yes"', 'port="5900" autoport="yes"')
    assert vconfig.vnc_port(live) == 5900
    assert vconfig.vnc_port(xml.replace('autoport="yes"', 'port="-1" autoport="yes"')) is None
    spec.vnc_listen = None
    assert ET.fromstring(vconfig.domain_xml(spec)).find("devices/graphics") is None
    assert vconfig.vnc_port("<not xml") is None


def test_spice_display():
    """With [spice] enabled the guest gets QEMU's SPICE display beside its VNC one (autoport); the
    live XML gives its port and, with TLS, its tlsPort."""
    spec = vconfig.GuestSpec(name="v", uuid="u", virt_type="qemu", memory_mb=64, vcpus=1, console_log="/c",
                             vnc_listen="127.0.0.1", spice_listen="127.0.0.1")
    xml = vconfig.domain_xml(spec)
    kinds = [(g.get("type"), g.get("autoport"), g.get("listen"))
             for g in ET.fromstring(xml).iterfind("devices/graphics")]
    assert kinds == [("vnc", "yes", "127.0.0.1"), ("spice", "yes", "127.0.0.1")]
    assert vconfig.graphics_port(xml, "spice") is None  # not started
    live = xml.replace('type="spice" autoport="yes"', 'type="spice" port="5901" tlsPort="5902" autoport="yes"')
    assert vconfig.graphics_port(live, "spice") == 5901 and vconfig.vnc_port(live) is None
    assert vconfig.graphics_port(live, "spice", "tlsPort") == 5902
    spec.spice_listen = None
    assert [g.get("type") for g in ET.fromstring(vconfig.domain_xml(spec)).iterfind("devices/graphics")] == ["vnc"]


def test_hot_plugged_interface_is_the_spawned_one():
    vif = vconfig.Vif("port-2", "fa:16:3e:00:00:02", "brqnet2", "tapport-2", mtu=1450)
    spec = vconfig.GuestSpec(name="instance-x", uuid="u", virt_type="qemu", memory_mb=64, vcpus=1,
                             console_log="/i/console.log", vifs=[vif], display_name="vm", flavor_name="f")
    xml = vconfig.domain_xml(spec)
    spawned = ET.fromstring(xml).find("devices/interface")
    plugged = ET.fromstring(vconfig.interface_xml(vif))
    assert (ET.canonicalize(vconfig.interface_xml(vif), strip_text=True)
            == ET.canonicalize(ET.tostring(spawned, encoding="unicode"), strip_text=True))  # one way to build it
    assert plugged.get("type") == "ethernet" and plugged.find("source") is None
    assert plugged.find("target").get("dev") == "tapport-2" and plugged.find("mac").get("address") == vif.mac
    assert vconfig.has_interface(xml, "FA:16:3E:00:00:02") and not vconfig.has_interface(xml, "fa:16:3e:00:00:03")


def test_metadata_with_a_port_added_or_removed():
    first = vconfig.Vif("port-1", "fa:16:3e:00:00:01", "brqnet", "tapport-1")
    xml = vconfig.domain_xml(vconfig.GuestSpec(name="instance-x", uuid="u", virt_type="qemu", memory_mb=64,
                                               vcpus=1, console_log="/c", vifs=[first], display_name="vm"))
    added = vconfig.metadata_with_port(xml, add=vconfig.Vif("port-2", "fa:16:3e:00:00:02", "brq2", "tapport-2"))
    root = ET.fromstring(added)
    # Without a namespace: libvirt's setMetadata puts it (and all within) in the one it is given.
    assert root.tag == "instance" and root.find("name").text == "vm"
    assert [p.get("id") for p in root.iter("port")] == ["port-1", "port-2"]

    def as_domain(meta: str) -> str:  # what the domain XML then reads
        ns = ET.fromstring(meta)
        for el in ns.iter():
            el.tag = f"{{{vconfig.NEFOS_NS}}}{el.tag}"
        return f"<domain><metadata>{ET.tostring(ns, encoding='unicode')}</metadata></domain>"
    assert [p["id"] for p in vconfig.ports_from_xml(as_domain(added))] == ["port-1", "port-2"]
    removed = vconfig.metadata_with_port(as_domain(added), remove="port-1")
    assert [p.get("id") for p in ET.fromstring(removed).iter("port")] == ["port-2"]
    assert vconfig.metadata_with_port("<domain/>", remove="port-1") is None


def _cpio_names(data: bytes) -> dict[str, bytes]:
    out, pos = {}, 0
    while True:
        header = data[pos:pos + 110]
        assert header[:6] == b"070701"
        fields = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        name = data[pos + 110:pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos:pos + size]
        pos += size
        pos += -pos % 4
        if name == "TRAILER!!!":
            return out
        out[name] = body


def test_guest_initramfs(tmp_path):
    image = build(tmp_path)
    again = build(tmp_path)
    assert again.ramdisk == image.ramdisk  # cached by the digest of its inputs
    files = _cpio_names(gzip.decompress(image.ramdisk.read_bytes()))
    assert files["init"] == b"/bin/busybox"
    assert b"acpid" in files["etc/init.d/rcS"]
    # Every NIC (eth0 at boot, others hot-plugged: busybox uevent runs the same script) gets a udhcpc.
    assert b"uevent /sbin/nefos-nic" in files["etc/init.d/rcS"] and b"/sbin/nefos-nic add" in files["etc/init.d/rcS"]
    assert b'udhcpc -i "$2"' in files["sbin/nefos-nic"]
    assert b"NEFOS-IP:" in files["etc/udhcpc.script"]
    assert b"poweroff" in files["etc/acpi/PWRF/00000080"]
    order = files["etc/modules.order"].decode().split()
    assert order.index("virtio_net") > order.index("net_failover") and "button" in order
    assert all(f"lib/modules/{m}.ko" in files for m in order)
    # The config drive's IDE CD-ROM: the controller before sr_mod (the drive is there when it binds).
    assert order.index("libata") < order.index("ata_piix") < order.index("sr_mod") and "isofs" in order
    assert b". /etc/nefos-config" in files["etc/init.d/rcS"] and b"nefos_config()" in files["etc/nefos-config"]
    assert files["usr/bin/lsblk"] == LSBLK.encode()
    # dropbear, every library ldd names and the loader, at the paths ldd gives.
    assert files["usr/sbin/dropbear"] == Path(DROPBEAR).read_bytes()
    libs = shared_libraries(DROPBEAR)
    assert any("ld-linux" in lib.name for lib in libs) and any(lib.name.startswith("libc.so") for lib in libs)
    assert all(files[str(lib).lstrip("/")] == lib.read_bytes() for lib in libs)
    # Deterministic: the same inputs give the same bytes.
    assert build_initramfs(image.kernel_version) == image.ramdisk.read_bytes()


def test_guest_lsblk_lists_disks_as_tempest_reads_them(tmp_path):
    """The guest's lsblk under busybox sh (on this host's /sys/block): Tempest's get_disks keeps the
    lines with "disk" under the header's TYPE column; sizes in bytes with -b, human-readable without."""
    script = tmp_path / "lsblk"
    script.write_text(LSBLK)
    out = subprocess.run(["busybox", "sh", str(script), "-lb", "--nodeps"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    pos = out[0].find("TYPE")
    assert out[0].split() == ["NAME", "MAJ:MIN", "RM", "SIZE", "RO", "TYPE", "MOUNTPOINT"] and pos > 0
    disks = [line for line in out[1:] if line[pos:pos + 4] == "disk"]
    expected = sorted(d.name for d in Path("/sys/block").iterdir()
                      if not d.name.startswith(("loop", "ram", "sr")))
    assert sorted(line.split()[0] for line in disks) == expected, out
    for line in disks:
        name, size = line.split()[0], line.split()[3]
        assert int(size) == int(Path(f"/sys/block/{name}/size").read_text()) * 512
    human = subprocess.run(["busybox", "sh", str(script)], capture_output=True, text=True, check=True).stdout
    assert all(not line.split()[3].isdigit() for line in human.splitlines()[1:]), human



CAPS = """<capabilities><host>
  <secmodel><model>none</model><doi>0</doi></secmodel>
  <secmodel><model>dac</model><doi>0</doi>
    <baselabel type='kvm'>{label}</baselabel><baselabel type='qemu'>{label}</baselabel></secmodel>
</host></capabilities>"""


def test_qemu_as_root_refuses_to_start():
    assert qemu_user.from_capabilities(CAPS.format(label="+64055:+64055"), "qemu") == qemu_user.QemuUser(64055, 64055)
    with pytest.raises(exceptions.HostConfigurationError, match='libvirt runs QEMU as root .*user = "root"'):
        qemu_user.from_capabilities(CAPS.format(label="+0:+0"), "qemu")
    with pytest.raises(exceptions.HostConfigurationError, match="no DAC security label"):
        qemu_user.from_capabilities("<capabilities><host/></capabilities>", "qemu")


@pytest.fixture
def outside_basetemp():
    """A directory not under pytest's basetemp (which every pytest session resets to 0700)."""
    top = Path(tempfile.mkdtemp(dir="/var/tmp"))
    os.chmod(top, 0o755)
    yield top
    shutil.rmtree(top)


def test_instances_path_opened_to_qemu_or_refused(outside_basetemp):
    user = qemu_user.QemuUser(64055, 64055)
    closed = outside_basetemp / "closed"  # a directory above the state dir, not Nefos's to open
    state = closed / "state"
    state.mkdir(parents=True)
    os.chmod(closed, 0o700)
    os.chmod(state, 0o700)
    with pytest.raises(exceptions.HostConfigurationError) as caught:
        qemu_user.prepare_instances_path(state / "instances", state, user)
    assert f"{closed} is mode 0700" in str(caught.value) and f"chmod g+x {closed}" in str(caught.value)

    os.chmod(closed, 0o711)
    qemu_user.prepare_instances_path(state / "instances", state, user)
    st = state.stat()  # the state dir: QEMU's group may pass, not list; nobody else may
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, 64055)
    for d in (state / "instances", state / "instances" / "_base"):
        st = d.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o750, 64055)
