"""A libvirt guest's diagnostics, from the domain's own statistics (Nova's libvirt
``get_diagnostics`` / ``get_instance_diagnostics``): vCPU times, each disk's block statistics and
each NIC's interface statistics by their target devices in the domain XML, and its memory. A
figure the hypervisor does not give is left out (free form) or ``None`` (standard form)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from nefos.host.virt import diagnostics
from nefos.host.virt.libvirt.host import libvirt_module


def collect(dom) -> dict:
    """Every figure of ``dom`` (blocking: run it through ``Host.call``)."""
    libvirt = libvirt_module()
    figures: dict = {"cpus": [], "disks": [], "nics": []}
    try:
        figures["cpus"] = [(info[0], info[2]) for info in dom.vcpus()[0]]  # (number, cpu time ns)
    except libvirt.libvirtError:
        pass
    root = ET.fromstring(dom.XMLDesc(0))
    for target in root.findall("./devices/disk/target"):
        dev = target.get("dev")
        try:
            figures["disks"].append((dev, dom.blockStats(dev)))
        except libvirt.libvirtError:
            pass
    for interface in root.findall("./devices/interface"):
        mac = interface.find("mac")
        dev = (interface.find("target") if interface.find("target") is not None else {}).get("dev")
        stats = None
        if dev:
            try:
                stats = dom.interfaceStats(dev)
            except libvirt.libvirtError:
                pass
        figures["nics"].append((mac.get("address") if mac is not None else None, dev, stats))
    figures["max_memory_kib"] = dom.maxMemory()
    figures["memory_kib"] = dom.info()[2]
    try:
        figures["memory_stats"] = dict(dom.memoryStats())
    except (libvirt.libvirtError, AttributeError):
        figures["memory_stats"] = {}
    return figures


def free_form(figures: dict) -> dict:
    """The pre-2.48 keys, as Nova's libvirt driver names them."""
    out: dict = {f"cpu{number}_time": time for number, time in figures["cpus"]}
    for dev, (rd_req, rd_bytes, wr_req, wr_bytes, errs) in figures["disks"]:
        out.update({f"{dev}_read_req": rd_req, f"{dev}_read": rd_bytes, f"{dev}_write_req": wr_req,
                    f"{dev}_write": wr_bytes, f"{dev}_errors": errs})
    for _mac, dev, stats in figures["nics"]:
        if stats is None:
            continue
        for name, value in zip(("rx", "rx_packets", "rx_errors", "rx_drop", "tx", "tx_packets", "tx_errors",
                                "tx_drop"), stats):
            out[f"{dev}_{name}"] = value
    out["memory"] = figures["max_memory_kib"]
    out.update({f"memory-{key}": value for key, value in figures["memory_stats"].items()})
    return out


def standard_form(figures: dict, *, power_state: int, virt_type: str | None, config_drive: bool,
                  instance: dict) -> dict:
    nics = []
    for mac, _dev, stats in figures["nics"]:
        nic = {"mac_address": mac}
        if stats is not None:
            nic.update(zip(("rx_octets", "rx_packets", "rx_errors", "rx_drop", "tx_octets", "tx_packets",
                            "tx_errors", "tx_drop"), stats))
        nics.append(nic)
    return diagnostics.standard(
        power_state=power_state, driver="libvirt", hypervisor=virt_type, hypervisor_os="linux",
        uptime=diagnostics.uptime(instance), config_drive=config_drive,
        cpus=[{"id": number, "time": time} for number, time in figures["cpus"]],
        nics=nics,
        disks=[{"read_bytes": s[1], "read_requests": s[0], "write_bytes": s[3], "write_requests": s[2],
                "errors_count": s[4]} for _dev, s in figures["disks"]],
        memory_maximum=figures["max_memory_kib"] // 1024, memory_used=figures["memory_kib"] // 1024)
