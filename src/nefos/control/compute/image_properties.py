"""An instance's image properties, kept in its system metadata (Compute API 2.98).

As Nova: at create and rebuild the image's properties are copied into the instance's
system metadata under ``image_<name>`` (values as text, at most 255 characters; the
large block-device-mapping ones skipped), with the image's ``min_ram``, ``min_disk``,
``disk_format`` and ``container_format``. From 2.98 the server's ``image`` shows, as
``properties``, those that are image properties Nova knows (its ImageMetaProps fields
and their legacy names), whatever the image holds now.
"""

from __future__ import annotations

PREFIX = "image_"
INHERITABLE = ("min_ram", "min_disk", "disk_format", "container_format")
SKIPPED = ("mappings", "block_device_mapping", "img_mappings", "img_block_device_mapping")

# Nova's ImageMetaProps fields.
KNOWN = frozenset((
    "hw_architecture", "hw_auto_disk_config", "hw_boot_menu", "hw_cdrom_bus", "hw_cpu_cores",
    "hw_cpu_max_cores", "hw_cpu_max_sockets", "hw_cpu_max_threads", "hw_cpu_policy", "hw_cpu_realtime_mask",
    "hw_cpu_sockets", "hw_cpu_thread_policy", "hw_cpu_threads", "hw_device_id", "hw_disk_bus", "hw_disk_type",
    "hw_emulation_architecture", "hw_ephemeral_encryption", "hw_ephemeral_encryption_format",
    "hw_ephemeral_encryption_secret_uuid", "hw_firmware_stateless", "hw_firmware_type", "hw_floppy_bus",
    "hw_input_bus", "hw_ipxe_boot", "hw_locked_memory", "hw_machine_type", "hw_maxphysaddr_bits",
    "hw_maxphysaddr_mode", "hw_mem_encryption", "hw_mem_encryption_model", "hw_mem_page_size", "hw_numa_cpus",
    "hw_numa_mem", "hw_numa_nodes", "hw_pci_numa_affinity_policy", "hw_pmu", "hw_pointer_model",
    "hw_qemu_guest_agent", "hw_redirected_usb_ports", "hw_rescue_bus", "hw_rescue_device", "hw_rng_model",
    "hw_scsi_model", "hw_serial_port_count", "hw_sound_model", "hw_time_hpet", "hw_tpm_model",
    "hw_tpm_version", "hw_usb_model", "hw_video_model", "hw_video_ram", "hw_vif_model",
    "hw_vif_multiqueue_enabled", "hw_viommu_model", "hw_virtio_packed_ring", "hw_vm_mode",
    "hw_watchdog_action", "img_bdm_v2", "img_bittorrent", "img_block_device_mapping", "img_cache_in_nova",
    "img_compression_level", "img_config_drive", "img_hide_hypervisor_id", "img_hv_requested_version",
    "img_hv_type", "img_linked_clone", "img_mappings", "img_owner_id", "img_root_device_name", "img_signature",
    "img_signature_certificate_uuid", "img_signature_hash_method", "img_signature_key_type", "img_use_agent",
    "img_version", "os_admin_user", "os_command_line", "os_distro", "os_require_quiesce", "os_secure_boot",
    "os_skip_agent_inject_files_at_boot", "os_skip_agent_inject_ssh", "os_type", "traits_required",
))
# Their legacy names (ImageMetaProps._legacy_property_map).
LEGACY = frozenset((
    "architecture", "auto_disk_config", "bdm_v2", "bittorrent", "block_device_mapping", "cache_in_nova",
    "hypervisor_type", "hypervisor_version_requires", "ipxe_boot", "mappings", "owner_id", "root_device_name",
    "vm_mode", "vmware_disktype", "vmware_image_version", "vmware_linked_clone", "vmware_ostype",
    "xenapi_device_id", "xenapi_image_compression_level", "xenapi_skip_agent_inject_files_at_boot",
    "xenapi_skip_agent_inject_ssh", "xenapi_use_agent",
))


def _truncate(value: str, length: int = 255) -> str:
    """At most ``length`` characters, and at most ``length`` bytes in UTF-8 (Nova's safe_truncate)."""
    value = value[:length]
    while len(value.encode("utf-8")) > length:
        value = value[:-1]
    return value


def _text(value) -> str:
    """str() of a value as Python (Nova) writes it: True, not true."""
    return value if isinstance(value, str) else str(value)


def from_image(image: dict, flavor: dict | None = None) -> dict:
    """The ``image_*`` system metadata of an instance booted (or rebuilt) from ``image``."""
    meta = {}
    for key, value in (image.get("properties") or {}).items():
        if key in SKIPPED:
            continue
        meta[PREFIX + key] = _truncate(_text(value))
    for key in INHERITABLE:
        value = image.get(key)
        if key == "min_disk" and flavor:
            root_gb = flavor.get("root_gb") or 0
            value = root_gb if image.get("disk_format") == "vhd" else max(value or 0, root_gb)
        if value is not None:
            meta[PREFIX + key] = value
    return meta


def replaced(system_metadata: dict | None, image: dict, flavor: dict | None = None) -> dict:
    """``system_metadata`` with the image's keys of another image (rebuild)."""
    kept = {k: v for k, v in (system_metadata or {}).items() if not k.startswith(PREFIX)}
    return {**kept, **from_image(image, flavor)}


def shown(system_metadata: dict | None) -> dict:
    """``image.properties`` of the server view (2.98)."""
    out = {}
    for key, value in (system_metadata or {}).items():
        if not key.startswith(PREFIX) or value is None:
            continue
        name = key[len(PREFIX):]
        if name in KNOWN or name in LEGACY:
            out[name] = value
    return out
