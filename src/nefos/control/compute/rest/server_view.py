"""How a server looks in the Compute API, per microversion."""

from __future__ import annotations

import datetime as dt
import hashlib

from nefos.control.compute import disk_config, image_properties
from nefos.model import states


def iso_z(value) -> str | None:
    """Nova's server timestamps: ``2013-11-14T06:29:00Z``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(microsecond=0).isoformat() + "Z"


def iso_micro(value) -> str | None:
    """Nova's timestamps elsewhere (actions, launched_at): ``2013-11-14T06:29:00.000000``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%f")


def host_id(instance: dict) -> str:
    host = instance.get("host")
    if not host:
        return ""
    return hashlib.sha224(f"{instance.get('project_id')}{host}".encode()).hexdigest()


def links(base: str, kind: str, ident: str) -> list[dict]:
    return [{"rel": "self", "href": f"{base}/v2.1/{kind}/{ident}"},
            {"rel": "bookmark", "href": f"{base}/{kind}/{ident}"}]


def addresses(instance: dict, extended: bool = True) -> dict:
    """The server's addresses by network; ``extended`` adds OS-EXT-IPS:type and the MAC."""
    result: dict[str, list] = {}
    for vif in instance.get("network_info") or []:
        network = vif.get("network") or {}
        entries = result.setdefault(network.get("label") or network.get("id", ""), [])
        for subnet in network.get("subnets") or []:
            for ip in subnet.get("ips") or []:
                # Each fixed address, then the floating addresses that reach it (as Nova lists them).
                for shown in (ip, *(ip.get("floating_ips") or [])):
                    entry = {"version": shown.get("version", subnet.get("ip_version", 4)), "addr": shown["address"]}
                    if extended:
                        entry["OS-EXT-IPS:type"] = shown.get("type", "fixed")
                        entry["OS-EXT-IPS-MAC:mac_addr"] = vif.get("address")
                    entries.append(entry)
    return result


def instance_name(instance: dict) -> str:
    return f"instance-{instance['id']:08x}"


def basic(instance: dict, base: str) -> dict:
    return {"id": instance["uuid"], "name": instance.get("display_name") or "",
            "links": links(base, "servers", instance["uuid"])}


def scheduler_hints(instance: dict) -> dict:
    """The hints given on create as Nova's request spec keeps them (2.100): every value a list."""
    return {hint: value if isinstance(value, list) else [value]
            for hint, value in (instance.get("scheduler_hints") or {}).items()}


def detail(instance: dict, base: str, version, ctx, *, extended: bool = True,
           server_groups: list[str] | None = None) -> dict:
    """The server as GET /servers/{id} shows it.

    ``extended=False`` is the narrower view PUT /servers/{id} and rebuild answer with
    before microversion 2.75 (Nova's ``show_all_attributes``): no OS-EXT-* / OS-SRV-USG
    attributes, key_name, config_drive, security groups or address extensions.
    ``server_groups`` (the uuids of the server's groups) is shown from 2.71 by show,
    update and rebuild, never by the detailed list. From 2.90 ``OS-EXT-SRV-ATTR:hostname``
    is shown to every user; 2.96 adds ``pinned_availability_zone``, 2.98 the image's
    properties (``image.properties``), 2.100 ``scheduler_hints``.
    """
    status = states.status_from_state(instance.get("vm_state"), instance.get("task_state"))
    flavor = instance.get("flavor") or {}
    if version.matches("2.47"):
        flavor_view = {"vcpus": flavor.get("vcpus"), "ram": flavor.get("memory_mb"),
                       "disk": flavor.get("root_gb"), "ephemeral": flavor.get("ephemeral_gb", 0),
                       "swap": flavor.get("swap", 0), "original_name": flavor.get("name")}
        if ctx.is_admin:
            flavor_view["extra_specs"] = flavor.get("extra_specs") or {}
    else:
        flavor_view = {"id": flavor.get("flavorid"), "links": [
            {"rel": "bookmark", "href": f"{base}/flavors/{flavor.get('flavorid')}"}]}
    image_ref = instance.get("image_ref")
    image_view = ({"id": image_ref, "links": [{"rel": "bookmark", "href": f"{base}/images/{image_ref}"}]}
                  if image_ref else "")
    if image_ref and version.matches("2.98"):
        image_view["properties"] = image_properties.shown(instance.get("system_metadata"))
    server = {
        "id": instance["uuid"],
        "name": instance.get("display_name") or "",
        "status": status,
        "tenant_id": instance.get("project_id") or "",
        "user_id": instance.get("user_id") or "",
        "metadata": instance.get("metadata") or {},
        "hostId": host_id(instance),
        "image": image_view,
        "flavor": flavor_view,
        "created": iso_z(instance.get("created_at")),
        "updated": iso_z(instance.get("updated_at") or instance.get("created_at")),
        "addresses": addresses(instance, extended),
        "accessIPv4": instance.get("access_ip_v4") or "",
        "accessIPv6": instance.get("access_ip_v6") or "",
        "links": links(base, "servers", instance["uuid"]),
        "OS-DCF:diskConfig": disk_config.to_api(instance),
    }
    if extended:
        server.update({
            "OS-EXT-AZ:availability_zone": instance.get("availability_zone") or (
                "nova" if instance.get("host") else ""),
            "config_drive": instance.get("config_drive") or "",
            "key_name": instance.get("key_name"),
            "OS-SRV-USG:launched_at": iso_micro(instance.get("launched_at")),
            "OS-SRV-USG:terminated_at": iso_micro(instance.get("terminated_at")),
            "OS-EXT-STS:task_state": instance.get("task_state"),
            "OS-EXT-STS:vm_state": instance.get("vm_state"),
            "OS-EXT-STS:power_state": instance.get("power_state") or 0,
            "os-extended-volumes:volumes_attached": [],
        })
        if version.matches("2.96"):  # the zone asked for on create or unshelve (Nova's request spec)
            server["pinned_availability_zone"] = instance.get("pinned_availability_zone")
        if instance.get("security_groups"):  # none: no key at all, as Nova
            server["security_groups"] = [{"name": name} for name in instance["security_groups"]]
    if status in ("BUILD", "ACTIVE"):
        server["progress"] = instance.get("progress") or 0
    if extended and ctx.is_admin:
        server["OS-EXT-SRV-ATTR:host"] = instance.get("host")
        server["OS-EXT-SRV-ATTR:instance_name"] = instance_name(instance)
        server["OS-EXT-SRV-ATTR:hypervisor_hostname"] = instance.get("node")
        if version.matches("2.3"):
            server.update({
                "OS-EXT-SRV-ATTR:reservation_id": instance.get("reservation_id"),
                "OS-EXT-SRV-ATTR:launch_index": instance.get("launch_index") or 0,
                "OS-EXT-SRV-ATTR:hostname": instance.get("hostname") or "",
                "OS-EXT-SRV-ATTR:kernel_id": "",
                "OS-EXT-SRV-ATTR:ramdisk_id": "",
                "OS-EXT-SRV-ATTR:root_device_name": "/dev/vda",
                "OS-EXT-SRV-ATTR:user_data": instance.get("user_data"),
            })
    if version.matches("2.9"):
        server["locked"] = bool(instance.get("locked"))
    if extended and version.matches("2.16") and ctx.is_admin:
        server["host_status"] = instance.get("host_status", "UP") if instance.get("host") else ""
    if version.matches("2.19"):
        server["description"] = instance.get("display_description")
    if version.matches("2.26"):
        server["tags"] = list(instance.get("tags") or [])
    if version.matches("2.63"):
        server["trusted_image_certificates"] = instance.get("trusted_certs") or None
    if server_groups is not None and version.matches("2.71"):
        server["server_groups"] = server_groups
    if version.matches("2.73"):
        server["locked_reason"] = instance.get("locked_reason")
    if version.matches("2.90") and "OS-EXT-SRV-ATTR:hostname" not in server:
        server["OS-EXT-SRV-ATTR:hostname"] = instance.get("hostname") or ""  # for every user from 2.90
    if version.matches("2.100"):
        server["scheduler_hints"] = scheduler_hints(instance)
    fault = instance.get("fault")
    if fault and status in ("ERROR", "DELETED"):
        fault_view = {"code": fault["code"], "created": iso_z(fault["created_at"]),
                      "message": fault["message"]}
        if fault.get("details") and (ctx.is_admin or fault["code"] != 500):
            fault_view["details"] = fault["details"]
        server["fault"] = fault_view
    return server
