"""A guest's diagnostics in the standard form (Nova's ``Diagnostics`` object, Compute API 2.48):
every field present, ``None`` where the driver has no figure, the counts from the lists."""

from __future__ import annotations

import datetime as dt

from nefos.model import states

_NIC_FIELDS = ("mac_address", "rx_octets", "rx_errors", "rx_drop", "rx_packets", "rx_rate", "tx_octets",
               "tx_errors", "tx_drop", "tx_packets", "tx_rate")
_DISK_FIELDS = ("read_bytes", "read_requests", "write_bytes", "write_requests", "errors_count")
_CPU_FIELDS = ("id", "time", "utilisation")


def _rows(items, fields) -> list[dict]:
    return [{name: item.get(name) for name in fields} for item in items or []]


def standard(*, power_state: int, driver: str, hypervisor: str | None, hypervisor_os: str | None,
             uptime: int | None, config_drive: bool, cpus=(), nics=(), disks=(),
             memory_maximum: int | None = None, memory_used: int | None = None) -> dict:
    """The 2.48 body; ``cpus``/``nics``/``disks``: dicts with (some of) each detail's fields;
    memory in MiB."""
    cpu_details, nic_details = _rows(cpus, _CPU_FIELDS), _rows(nics, _NIC_FIELDS)
    disk_details = _rows(disks, _DISK_FIELDS)
    return {"state": states.POWER_STATE_NAMES.get(power_state, "pending"), "driver": driver,
            "hypervisor": hypervisor, "hypervisor_os": hypervisor_os, "uptime": uptime,
            "config_drive": bool(config_drive), "num_cpus": len(cpu_details), "num_nics": len(nic_details),
            "num_disks": len(disk_details), "cpu_details": cpu_details, "nic_details": nic_details,
            "disk_details": disk_details, "memory_details": {"maximum": memory_maximum, "used": memory_used}}


def uptime(instance: dict) -> int | None:
    """Seconds since the server was (last) launched, as Nova's libvirt driver counts them."""
    launched = instance.get("launched_at")
    if not launched:
        return None
    if isinstance(launched, str):
        launched = dt.datetime.fromisoformat(launched)
    if launched.tzinfo is not None:
        launched = launched.astimezone(dt.timezone.utc).replace(tzinfo=None)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    return max(int((now - launched).total_seconds()), 0)
