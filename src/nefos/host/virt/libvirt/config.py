"""Domain XML for a guest (Nova's ``nova.virt.libvirt.config``, reduced to what Nefos uses).

``GuestSpec`` holds what spawn decided (CPU, memory, boot, disks, VIFs, the
console file); ``domain_xml`` renders it. The domain carries Nefos metadata
(``<nefos:instance>``): the instance's name, flavor and the ports of its VIFs
(tap, MAC, the bridge the L2 agent puts the tap in), so a restarted compute
host knows which port each tap belongs to. VIFs are ``<interface
type='ethernet'>``: a tap libvirt makes and attaches to nothing; the host's L2
agent wires it into the network's bridge.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

NEFOS_NS = "https://nefos.invalid/xmlns/libvirt/instance/1"


@dataclass
class Disk:
    path: str
    target: str  # vda, vdb, ...
    driver_type: str = "qcow2"
    bus: str = "virtio"
    device: str = "disk"  # or "cdrom" (the config drive)
    readonly: bool = False


@dataclass
class Vif:
    port_id: str
    mac: str
    bridge: str
    devname: str
    model: str = "virtio"
    mtu: int | None = None


@dataclass
class GuestSpec:
    name: str
    uuid: str
    virt_type: str  # "qemu" (TCG) or "kvm"
    memory_mb: int
    vcpus: int
    console_log: str
    kernel: str | None = None
    ramdisk: str | None = None
    cmdline: str | None = None
    disks: list[Disk] = field(default_factory=list)
    vifs: list[Vif] = field(default_factory=list)
    display_name: str = ""
    flavor_name: str = ""
    vnc_listen: str | None = None  # the address of the guest's VNC display; None: no display
    spice_listen: str | None = None  # the address of its SPICE display; None: none


def disk_element(disk: Disk) -> ET.Element:
    d = ET.Element("disk", type="file", device=disk.device)
    _sub(d, "driver", name="qemu", type=disk.driver_type)
    _sub(d, "source", file=disk.path)
    _sub(d, "target", dev=disk.target, bus=disk.bus)
    if disk.readonly:
        _sub(d, "readonly")
    return d


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs) -> ET.Element:
    el = ET.SubElement(parent, tag, {k.rstrip("_"): str(v) for k, v in attrs.items() if v is not None})
    if text is not None:
        el.text = str(text)
    return el


def _interface(vif: Vif) -> ET.Element:
    """A guest's NIC, in the domain XML and hot-plugged alike (one way to build it).

    type='ethernet': libvirt creates the tap (up, on no bridge) and deletes it when the domain
    stops; the host's L2 agent wires it into the network's bridge (nefos.agents.l2_agent).
    Until then the guest's NIC reaches nothing: no DHCP, no address."""
    i = ET.Element("interface", type="ethernet")
    _sub(i, "mac", address=vif.mac)
    _sub(i, "target", dev=vif.devname)
    _sub(i, "model", type=vif.model)
    if vif.mtu:
        _sub(i, "mtu", size=vif.mtu)
    return i


def interface_xml(vif: Vif) -> str:
    """The ``<interface>`` device of ``vif`` alone (``attachDeviceFlags`` / ``detachDeviceFlags``)."""
    return ET.tostring(_interface(vif), encoding="unicode")


def _port_metadata(ports: ET.Element, vif: Vif) -> None:
    _sub(ports, f"{{{NEFOS_NS}}}port", id=vif.port_id, devname=vif.devname, mac=vif.mac, bridge=vif.bridge)


def metadata_with_port(xml: str, *, add: Vif | None = None, remove: str | None = None) -> str | None:
    """The domain's ``<nefos:instance>`` metadata with the port ``add`` recorded or the port id
    ``remove`` dropped, without its namespace (``setMetadata`` adds it: key ``nefos``, uri
    ``NEFOS_NS``), for after a hot-plug; None without Nefos metadata."""
    ET.register_namespace("nefos", NEFOS_NS)
    try:
        inst = ET.fromstring(xml).find(f"metadata/{{{NEFOS_NS}}}instance")
    except ET.ParseError:
        return None
    if inst is None:
        return None
    ports = inst.find(f"{{{NEFOS_NS}}}ports")
    if ports is None:
        ports = ET.SubElement(inst, f"{{{NEFOS_NS}}}ports")
    for port in list(ports):
        if port.get("id") in (remove, add.port_id if add else None):
            ports.remove(port)
    if add is not None:
        _port_metadata(ports, add)
    for el in inst.iter():  # libvirt puts the element (and all within) in the namespace it is given
        el.tag = el.tag.rsplit("}", 1)[-1]
    return ET.tostring(inst, encoding="unicode")


def has_interface(xml: str, mac: str) -> bool:
    """Whether the domain XML has a NIC with this MAC."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return False
    return any((m.get("address") or "").lower() == mac.lower() for m in root.findall("./devices/interface/mac"))


def domain_xml(spec: GuestSpec) -> str:
    ET.register_namespace("nefos", NEFOS_NS)
    dom = ET.Element("domain", type=spec.virt_type)
    _sub(dom, "name", spec.name)
    _sub(dom, "uuid", spec.uuid)
    if spec.display_name:
        _sub(dom, "title", spec.display_name)
    meta = _sub(dom, "metadata")
    inst = ET.SubElement(meta, f"{{{NEFOS_NS}}}instance")
    _sub(inst, f"{{{NEFOS_NS}}}name", spec.display_name)
    _sub(inst, f"{{{NEFOS_NS}}}flavor", spec.flavor_name)
    ports = ET.SubElement(inst, f"{{{NEFOS_NS}}}ports")
    for vif in spec.vifs:
        _port_metadata(ports, vif)
    _sub(dom, "memory", spec.memory_mb, unit="MiB")
    _sub(dom, "currentMemory", spec.memory_mb, unit="MiB")
    _sub(dom, "vcpu", spec.vcpus)
    os_ = _sub(dom, "os")
    _sub(os_, "type", "hvm", arch="x86_64")
    if spec.kernel:
        _sub(os_, "kernel", spec.kernel)
        if spec.ramdisk:
            _sub(os_, "initrd", spec.ramdisk)
        if spec.cmdline:
            _sub(os_, "cmdline", spec.cmdline)
    else:
        _sub(os_, "boot", dev="hd")
    features = _sub(dom, "features")
    _sub(features, "acpi")  # without it a guest's poweroff only halts: the domain never stops
    _sub(features, "apic")
    if spec.virt_type == "kvm":
        _sub(dom, "cpu", mode="host-passthrough")
    else:
        # TCG: QEMU's default model, qemu64, plus RDRAND (as Nova's cpu_mode = custom, cpu_models =
        # qemu64, cpu_model_extra_flags = rdrand). Without it a guest kernel's random pool is not
        # ready until it has gathered timer jitter, 1.5-2.5 s into a TCG boot, and every
        # getrandom() waits for it: dropbear's first connection (its host key, its key exchange)
        # among them. With it the pool is ready at once (RANDOM_TRUST_CPU, Debian's kernels).
        cpu = _sub(dom, "cpu", mode="custom", match="exact", check="none")
        _sub(cpu, "model", "qemu64", fallback="forbid")
        _sub(cpu, "feature", policy="require", name="rdrand")
    _sub(dom, "clock", offset="utc")
    _sub(dom, "on_poweroff", "destroy")
    _sub(dom, "on_reboot", "restart")
    _sub(dom, "on_crash", "destroy")
    devices = _sub(dom, "devices")
    for disk in spec.disks:
        devices.append(disk_element(disk))
    for vif in spec.vifs:
        devices.append(_interface(vif))
    # The serial console on a pty whose output virtlogd writes to the log (Nova's libvirt driver): a
    # guest cannot grow it past virtlogd's max_size (2 MiB, then rotated; max_backups old copies),
    # where a file chardev written by QEMU grows without bound. append='on' (Nova: 'off') keeps
    # the boots before a hard reboot or a start in the log, within that bound.
    serial = _sub(devices, "serial", type="pty")
    _sub(serial, "log", file=spec.console_log, append="on")
    _sub(serial, "target", port=0)
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port=0)
    if spec.vnc_listen:
        # The guest's display for remote consoles (Nova's libvirt driver with [vnc] enabled): QEMU
        # picks a free port (autoport) on the compute host; the live XML says which.
        _sub(devices, "graphics", type="vnc", autoport="yes", listen=spec.vnc_listen)
    if spec.spice_listen:  # beside it with [spice] enabled, as Nova's libvirt driver
        _sub(devices, "graphics", type="spice", autoport="yes", listen=spec.spice_listen)
    _sub(devices, "memballoon", model="none")
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode")


def vnc_port(xml: str) -> int | None:
    """The port of the running domain's VNC display (its live XML); None when it has none."""
    return graphics_port(xml, "vnc")


def graphics_port(xml: str, kind: str, attr: str = "port") -> int | None:
    """A port (``port`` or ``tlsPort``) of the running domain's ``kind`` display (its live XML);
    None when it has none."""
    try:
        graphics = ET.fromstring(xml).find(f"./devices/graphics[@type='{kind}']")
    except ET.ParseError:
        return None
    try:
        port = int(graphics.get(attr, "-1")) if graphics is not None else -1
    except ValueError:
        return None
    return port if port > 0 else None  # -1: not running (autoport assigns one at start)


def ports_from_xml(xml: str) -> list[dict]:
    """The ports recorded in a domain's Nefos metadata: [{id, devname, mac, bridge}]."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    return [dict(p.attrib) for p in root.iter(f"{{{NEFOS_NS}}}port")]


def bridges_of_bridge_interfaces(xml: str) -> set[str]:
    """The bridges named by ``<interface type='bridge'>`` (domains defined by an older Nefos)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return set()
    return {s.get("bridge") for s in root.findall("./devices/interface[@type='bridge']/source") if s.get("bridge")}


def ethernet_taps(xml: str) -> list[str]:
    """The tap names of a domain's ``<interface type='ethernet'>`` devices."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    return [t.get("dev") for t in root.findall("./devices/interface[@type='ethernet']/target") if t.get("dev")]


def disks_from_xml(xml: str) -> list[str]:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    return [s.get("file") for s in root.findall("./devices/disk/source") if s.get("file")]
