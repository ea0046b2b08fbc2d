"""``/v2.1/servers``: create, list, show, update, delete (Compute API reference).

Microversions past 2.47: 2.52 ``tags`` on create; 2.54 ``key_name`` on rebuild
(null removes it; the rebuild answer shows it); 2.57 no ``personality`` on create
or rebuild, ``user_data`` on rebuild; 2.63 ``trusted_image_certificates`` on
create and rebuild, shown by every detailed view; 2.66 ``changes-before``; 2.67
``volume_type`` in block device mappings; 2.71 ``server_groups`` in show,
update and rebuild; 2.73 ``locked_reason`` and the ``locked`` filter; 2.74
``host`` / ``hypervisor_hostname`` on create (admin); 2.75 unknown query
parameters of the lists are refused and update/rebuild answer with the whole
server; 2.83 non-admins may filter the lists by availability_zone, config_drive,
key_name, created_at, launched_at, terminated_at, power_state, task_state,
vm_state, progress and user_id (before, as Nova, those filters are dropped for
them); 2.90 ``hostname`` on create, update and rebuild (one server only on
create), shown to every user, and a list filter for non-admins; 2.94 the
hostname may be an FQDN; 2.96 ``pinned_availability_zone``, 2.98 the image's
properties and 2.100 ``scheduler_hints`` in show, the detailed list, update
and rebuild; 2.102 show refuses query parameters; 2.104 update unpins (null) or
re-pins ``pinned_availability_zone`` (``ComputeAPI.update``).
"""

from __future__ import annotations

import copy
import datetime as dt

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from nefos import exceptions, rest
from nefos import policy
from nefos.control.compute.rest import common, server_view
from nefos.control.compute.rest import response_schemas as responses
from nefos.control.compute.rest.validation import (NAME, bool_from_string, is_uuid_like, query_schema, refuse_query_from_2102,
                                  validate, validate_query)
from nefos.control.compute import disk_config
from nefos.control.compute.services import COMPUTE_BINARY
from nefos.model import states
from nefos.openapi import documented
from nefos.control.compute.rest import microversion
from nefos.control.compute.authorization import authorize

router = APIRouter()

_UUID_OR_URL = {"type": "string", "maxLength": 2048}
_COUNT = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 1, "minLength": 1}
_METADATA = {"type": "object",
             "patternProperties": {r"^[a-zA-Z0-9-_:. ]{1,255}$": {"type": "string", "maxLength": 255}},
             "additionalProperties": False}
_NETWORK = {"type": "object", "properties": {
    "uuid": {"type": "string", "format": "uuid"},
    "port": {"type": ["string", "null"], "format": "uuid"},
    "fixed_ip": {"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]},
    "tag": {"type": "string", "maxLength": 60}}, "additionalProperties": False}


# personality (before 2.57): Nova's schema, neither key required (a missing one is refused after).
_PERSONALITY = {"type": "array", "items": {"type": "object", "properties": {
    "path": {"type": "string"}, "contents": {"type": "string", "format": "base64"}},
    "additionalProperties": False}}


def injected_files(personality: list[dict] | None) -> list[dict]:
    """The files a ``personality`` list injects (400 for an entry without path or contents)."""
    files = []
    for item in personality or []:
        for key in ("path", "contents"):
            if key not in item:
                raise exceptions.ValidationError(f"Bad personality format: missing '{key}'")
        files.append({"path": item["path"], "contents": item["contents"]})
    return files


_BDM_V2 = {"type": "array", "items": {"type": "object", "properties": {
    "uuid": {"type": "string", "minLength": 1, "maxLength": 255},
    "source_type": {"type": "string", "enum": ["volume", "image", "snapshot", "blank"]},
    "destination_type": {"type": "string", "enum": ["local", "volume"]},
    "boot_index": {"type": ["integer", "string", "null"]},
    "volume_size": {"type": ["integer", "string", "null"]},
    "guest_format": {"type": ["string", "null"], "maxLength": 255},
    "device_name": {"type": ["string", "null"], "maxLength": 255},
    "device_type": {"type": ["string", "null"], "maxLength": 255},
    "disk_bus": {"type": ["string", "null"], "maxLength": 255},
    "delete_on_termination": {"type": ["boolean", "string"]},
    "no_device": {},
    "tag": {"type": "string", "maxLength": 60},
}, "additionalProperties": False}}


_TAG = {"type": "string", "pattern": "^[^,/]*$", "minLength": 1, "maxLength": 60}
MAX_TAGS = 50
_TRUSTED_CERTS = {"type": ["array", "null"], "minItems": 1, "maxItems": 50, "uniqueItems": True,
                  "items": {"type": "string", "minLength": 1}}
_FQDN = {"type": "string", "pattern": "^[a-zA-Z0-9-._]*$", "minLength": 1, "maxLength": 255}
# 2.90: a hostname on create, update and rebuild (an RFC 952 label); from 2.94 an FQDN.
_HOSTNAME = {"type": "string", "pattern": "^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$", "minLength": 2,
             "maxLength": 63}


def _hostname_schema(version) -> dict | None:
    if version.matches("2.94"):
        return _FQDN
    return _HOSTNAME if version.matches("2.90") else None


# The hints the scheduler reads are validated as Nova's; other hints pass (Nova allows any).
_SERVER_UUIDS = {"oneOf": [{"type": "string", "format": "uuid"},
                           {"type": "array", "items": {"type": "string", "format": "uuid"}}]}
_HINTS = {"type": "object", "properties": {
    "different_host": _SERVER_UUIDS,
    "same_host": {"type": ["string", "array"], "items": {"type": "string", "format": "uuid"}}}}


def create_schema(version) -> dict:
    networks: dict = {"type": "array", "items": _NETWORK}
    if version.matches("2.37"):
        networks = {"oneOf": [networks, {"type": "string", "enum": ["none", "auto"]}]}
    props = {
        "name": NAME,
        "imageRef": {"type": "string", "maxLength": 2048},
        "flavorRef": {"type": ["string", "integer"], "minLength": 1, "maxLength": 255},
        "adminPass": {"type": "string", "maxLength": 255},
        "metadata": _METADATA,
        "networks": networks,
        "security_groups": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 255}},
            "required": ["name"], "additionalProperties": False}},
        "min_count": _COUNT,
        "max_count": _COUNT,
        "return_reservation_id": {"type": ["boolean", "string"],
                                  "enum": [True, False, "True", "False", "true", "false", "1", "0"]},
        "availability_zone": {"type": "string", "minLength": 1, "maxLength": 255},
        "key_name": {"type": "string", "minLength": 1, "maxLength": 255},
        "user_data": {"type": "string", "format": "base64", "maxLength": 65535},
        "accessIPv4": {"type": "string", "format": "ipv4"},
        "accessIPv6": {"type": "string", "format": "ipv6"},
        "config_drive": {"type": ["boolean", "string"]},
        "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
        "personality": _PERSONALITY,
        "block_device_mapping_v2": _BDM_V2,
    }
    if version.matches("2.19"):
        props["description"] = {"type": ["string", "null"], "maxLength": 255}
    if version.matches("2.52"):
        props["tags"] = {"type": "array", "items": _TAG, "maxItems": MAX_TAGS}
    if version.matches("2.57"):
        del props["personality"]
    if version.matches("2.63"):
        props["trusted_image_certificates"] = _TRUSTED_CERTS
    if version.matches("2.67"):
        bdm = copy.deepcopy(_BDM_V2)
        bdm["items"]["properties"]["volume_type"] = {"type": ["string", "null"], "minLength": 0, "maxLength": 255}
        props["block_device_mapping_v2"] = bdm
    if version.matches("2.74"):
        props["host"] = _FQDN
        props["hypervisor_hostname"] = _FQDN
    if _hostname_schema(version):
        props["hostname"] = _hostname_schema(version)
    required = ["name", "flavorRef"]
    if version.matches("2.37"):
        required.append("networks")
    return {
        "type": "object",
        "properties": {
            "server": {"type": "object", "properties": props, "required": required,
                       "additionalProperties": False},
            "os:scheduler_hints": _HINTS,
            "OS-SCH-HNT:scheduler_hints": _HINTS,
        },
        "required": ["server"],
        "additionalProperties": False,
    }


def update_schema(version) -> dict:
    props = {"name": NAME, "accessIPv4": {"type": "string", "format": "ipv4"},
             "accessIPv6": {"type": "string", "format": "ipv6"},
             "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]}}
    if version.matches("2.19"):
        props["description"] = {"type": ["string", "null"], "maxLength": 255}
    if _hostname_schema(version):
        props["hostname"] = _hostname_schema(version)
    if version.matches("2.104"):  # unpin (null) or re-pin the server's zone
        props["pinned_availability_zone"] = {"oneOf": [NAME, {"type": "null"}]}
    return {"type": "object", "properties": {
        "server": {"type": "object", "properties": props, "additionalProperties": False}},
        "required": ["server"], "additionalProperties": False}


def rebuild_schema(version) -> dict:
    props = {"imageRef": {"type": "string", "minLength": 1, "maxLength": 2048}, "name": NAME,
             "adminPass": {"type": "string", "maxLength": 255}, "metadata": _METADATA,
             "accessIPv4": {"type": "string", "format": "ipv4"}, "accessIPv6": {"type": "string", "format": "ipv6"},
             "preserve_ephemeral": {"type": "boolean"},
             "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
             "personality": _PERSONALITY}
    if version.matches("2.19"):
        props["description"] = {"type": ["string", "null"], "maxLength": 255}
    if version.matches("2.54"):
        props["key_name"] = {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 255}, {"type": "null"}]}
    if version.matches("2.57"):
        del props["personality"]
        props["user_data"] = {"type": ["string", "null"], "format": "base64", "maxLength": 65535}
    if version.matches("2.63"):
        props["trusted_image_certificates"] = _TRUSTED_CERTS
    if _hostname_schema(version):
        props["hostname"] = _hostname_schema(version)
    return {"type": "object", "properties": {"rebuild": {
        "type": "object", "properties": props, "required": ["imageRef"], "additionalProperties": False}},
        "required": ["rebuild"], "additionalProperties": False}


async def rebuild_server(request: Request, ctx, server_id: str, body: dict) -> dict:
    """The rebuild action: 202 with the server (and its new adminPass), as Nova answers."""
    version = request.state.api_version
    validate(body, rebuild_schema(version))
    args = body["rebuild"]
    updates = {key: args[api_key] for api_key, key in (
        ("name", "name"), ("description", "description"), ("metadata", "metadata"),
        ("accessIPv4", "access_ip_v4"), ("accessIPv6", "access_ip_v6")) if api_key in args}
    for key in ("access_ip_v4", "access_ip_v6"):
        if updates.get(key):
            updates[key] = _normalized_ip(updates[key])
    if version.matches("2.54") and "key_name" in args:
        updates["key_name"] = args["key_name"]
    if version.matches("2.57") and "user_data" in args:
        updates["user_data"] = args["user_data"]
    # Nova injects the files given (none when none are) into the rebuilt guest.
    updates["injected_files"] = injected_files(args.get("personality"))
    if version.matches("2.63") and "trusted_image_certificates" in args:
        authorize(ctx, "os_compute_api:servers:rebuild:trusted_certs")
        updates["trusted_certs"] = args["trusted_image_certificates"]
    if version.matches("2.90") and "hostname" in args:
        updates["hostname"] = args["hostname"]
    updates["auto_disk_config"] = disk_config.from_api(args.get("OS-DCF:diskConfig"))
    password = updates["admin_pass"] = _admin_password(request, args)
    instance = await _compute_api(request).rebuild(ctx, server_id, args["imageRef"], updates)
    view = server_view.detail(instance, base_url(request), version, ctx, extended=version.matches("2.75"),
                              server_groups=await _server_groups(request, instance))
    if version.matches("2.54"):
        view["key_name"] = instance.get("key_name")
    if version.matches("2.57"):  # the user data, for everyone, instead of the admin's extended attribute
        view.pop("OS-EXT-SRV-ATTR:user_data", None)
        view["user_data"] = instance.get("user_data")
    if password is not None and request.app.state.rt.cfg.enable_instance_password:
        view["adminPass"] = password
    return {"server": view}


async def _server_groups(request: Request, instance: dict) -> list[str] | None:
    """2.71: the groups show, update and rebuild name."""
    if not request.state.api_version.matches("2.71"):
        return None
    from nefos.objects.server_groups import groups_of
    return await groups_of(request.app.state.rt.db, instance["uuid"])


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _compute_api(request: Request):
    return request.app.state.compute_api


def _requested_networks(server: dict, version):
    networks = server.get("networks")
    if networks is None:
        return None
    if isinstance(networks, str):
        return networks
    result = []
    for net in networks:
        if not net.get("uuid") and not net.get("port"):
            raise exceptions.ValidationError("Bad network format: missing 'uuid'")
        result.append({k: net[k] for k in ("uuid", "port", "fixed_ip", "tag") if net.get(k)})
    return result


@router.post("/v2.1/servers")
@documented(request=lambda: create_schema(microversion.MIN), responses={202: responses.SERVER_CREATED})
async def create_server(request: Request):
    ctx = authorize(rest.get_context(request), "os_compute_api:servers:create")
    version = request.state.api_version
    body = await rest.json_body(request)
    validate(body, create_schema(version))
    server = body["server"]
    files = injected_files(server.get("personality"))
    min_count = int(server.get("min_count", 1))
    max_count = int(server.get("max_count", min_count))
    if min_count < 1 or max_count < 1:
        raise exceptions.ValidationError("Invalid input for field/attribute min_count or max_count. "
                                         "Value must be >= 1")
    if min_count > max_count:
        raise exceptions.ValidationError("min_count must be <= max_count")
    hints = body.get("os:scheduler_hints") or body.get("OS-SCH-HNT:scheduler_hints") or {}
    trusted_certs = server.get("trusted_image_certificates")
    if trusted_certs:
        authorize(ctx, "os_compute_api:servers:create:trusted_certs")
    requested_host, requested_node = server.get("host"), server.get("hypervisor_hostname")
    if requested_host or requested_node:
        authorize(ctx, "compute:servers:create:requested_destination")
        if ":" in (server.get("availability_zone") or ""):
            raise exceptions.ValidationError("One mechanism with host and/or hypervisor_hostname and another "
                                             "mechanism with zone:host:node are mutually exclusive.")
    image_ref = (server.get("imageRef") or "").rstrip("/").rsplit("/", 1)[-1] or None
    if image_ref and not is_uuid_like(image_ref):
        raise exceptions.ValidationError("Invalid imageRef provided.")
    image_ref, local_disks = _block_devices(server.get("block_device_mapping_v2") or [], image_ref)
    flavor_ref = str(server["flavorRef"]).rstrip("/").rsplit("/", 1)[-1]
    requested_networks = _requested_networks(server, version)
    for key in ("accessIPv4", "accessIPv6"):
        if server.get(key):
            server[key] = _normalized_ip(server[key])
    password = _admin_password(request, server)
    try:
        instances, reservation_id = await _compute_api(request).create(
            ctx, name=server["name"], image_ref=image_ref, flavor_ref=flavor_ref,
            min_count=min_count, max_count=max_count,
            requested_networks=requested_networks,
            security_groups=[sg["name"] for sg in server.get("security_groups") or []] or None,
            availability_zone=server.get("availability_zone"), metadata=server.get("metadata"),
            key_name=server.get("key_name"), user_data=server.get("user_data"),
            admin_pass=password, scheduler_hints=hints, local_disks=local_disks,
            description=server.get("description"), access_ip_v4=server.get("accessIPv4"),
            access_ip_v6=server.get("accessIPv6"),
            config_drive="True" if str(server.get("config_drive", "")).lower() in ("true", "1") else None,
            tags=server.get("tags"), trusted_certs=trusted_certs, requested_host=requested_host,
            requested_node=requested_node, hostname=server.get("hostname"),
            auto_disk_config=disk_config.from_api(server.get("OS-DCF:diskConfig")),
            injected_files=files)
    except exceptions.FlavorNotFound:
        raise exceptions.ValidationError("Flavor '%s' could not be found." % flavor_ref) from None
    except exceptions.ImageNotFound:
        raise exceptions.ValidationError("Can not find requested image") from None
    except (exceptions.NetworkNotFound, exceptions.PortNotFound, exceptions.SecurityGroupNotFound,
            exceptions.NetworkRequiresSubnet, exceptions.InvalidIpAddress,
            exceptions.FixedIpAlreadyInUse) as exc:  # all 400 in Nova's create
        raise exceptions.ValidationError(str(exc)) from None
    if str(server.get("return_reservation_id", "")).lower() in ("true", "1"):
        return JSONResponse({"reservation_id": reservation_id}, status_code=202)
    first = instances[0]
    view = {"id": first["uuid"], "links": server_view.links(base_url(request), "servers", first["uuid"]),
            "OS-DCF:diskConfig": disk_config.to_api(first),
            "security_groups": [{"name": n} for n in first.get("security_groups") or []]}
    if password is not None and request.app.state.rt.cfg.enable_instance_password:
        view["adminPass"] = password
    return JSONResponse({"server": view}, status_code=202,
                        headers={"Location": f"{base_url(request)}/v2.1/servers/{first['uuid']}"})


def _normalized_ip(value: str) -> str:
    """Nova stores access IPs in their canonical form ('0000:...:babe:220.12.22.2' -> '::babe:dc0c:1602')."""
    import ipaddress
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value


def _block_devices(bdms: list[dict], image_ref: str | None) -> tuple[str | None, list[dict] | None]:
    """Accept the block_device_mapping_v2 forms a cloud without volumes can honour.

    The image booted on a local disk (what the openstack CLI sends with --image)
    and blank local disks (ephemeral, or swap with guest_format "swap"); volumes
    are refused, since Nefos has no block storage service.
    """
    local_disks = []
    for bdm in bdms:
        source, dest = bdm.get("source_type"), bdm.get("destination_type", "local")
        if dest == "volume" or source in ("volume", "snapshot"):
            raise exceptions.ValidationError("Block Device Mapping is Invalid: volumes are not "
                                             "supported by this cloud.")
        boot_index = bdm.get("boot_index")
        if source == "image":
            if str(boot_index) != "0":
                raise exceptions.ValidationError("Block Device Mapping is Invalid: an image can only "
                                                 "be the boot disk (boot_index 0).")
            if image_ref and bdm.get("uuid") != image_ref:
                raise exceptions.ValidationError("Block Device Mapping is Invalid: the boot image does "
                                                 "not match imageRef.")
            image_ref = bdm.get("uuid")
        elif source == "blank":
            try:
                size = int(bdm.get("volume_size") or 0)
            except (TypeError, ValueError):
                raise exceptions.ValidationError("Block Device Mapping is Invalid: volume_size must be "
                                                 "an integer.")
            if size <= 0:
                raise exceptions.ValidationError("Block Device Mapping is Invalid: a blank disk needs a "
                                                 "positive volume_size.")
            local_disks.append({"size": size, "guest_format": bdm.get("guest_format"),
                                "device_name": bdm.get("device_name")})
    return image_ref, (local_disks or None)


def _admin_password(request: Request, body: dict) -> str | None:
    """The guest's password: the one given, else (with enable_instance_password, as Nova's API)
    a generated one; None: the guest's is left as its image has it."""
    if body.get("adminPass"):
        return body["adminPass"]
    return _generate_password() if request.app.state.rt.cfg.enable_instance_password else None


def _generate_password(length: int = 12) -> str:
    import secrets
    import string
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


_LIST_FILTERS = ("name", "status", "changes-since", "changes-before", "reservation_id", "host", "node", "image",
                 "flavor", "all_tenants", "project_id", "tenant_id", "deleted", "vm_state", "task_state",
                 "key_name", "availability_zone", "user_id", "locked", "ip", "ip6",
                 "tags", "tags-any", "not-tags", "not-tags-any",
                 "config_drive", "created_at", "launched_at", "terminated_at", "power_state", "progress",
                 "hostname")
# The filters a caller without os_compute_api:servers:allow_all_filters may use, by the microversion
# that allowed them (Nova's _get_server_search_options); the others are dropped silently.
_NON_ADMIN_FILTERS = (
    ("2.1", ("reservation_id", "name", "status", "image", "flavor", "ip", "changes-since", "all_tenants")),
    ("2.5", ("ip6",)),
    ("2.26", ("tags", "tags-any", "not-tags", "not-tags-any")),
    ("2.66", ("changes-before",)),
    ("2.73", ("locked",)),
    ("2.83", ("availability_zone", "config_drive", "key_name", "created_at", "launched_at", "terminated_at",
              "power_state", "task_state", "vm_state", "progress", "user_id")),
    ("2.90", ("hostname",)),
)


def _non_admin_filters(version) -> set[str]:
    return {name for since, names in _NON_ADMIN_FILTERS if version.matches(since) for name in names}
# Each list filter's first microversion (the others: 2.1).
_FILTER_SINCE = {"tags": "2.26", "tags-any": "2.26", "not-tags": "2.26", "not-tags-any": "2.26",
                 "changes-before": "2.66", "locked": "2.73"}
# What Nova's list accepts at 2.75, where anything else is a 400 (besides names starting with "_").
_QUERY_V275 = (
    "user_id", "project_id", "tenant_id", "launch_index", "image_ref", "image", "kernel_id", "ramdisk_id",
    "hostname", "key_name", "power_state", "vm_state", "task_state", "host", "node", "flavor", "reservation_id",
    "launched_at", "terminated_at", "availability_zone", "name", "display_name", "description",
    "display_description", "locked_by", "uuid", "root_device_name", "config_drive", "access_ip_v4",
    "access_ip_v6", "auto_disk_config", "progress", "sort_key", "sort_dir", "all_tenants", "soft_deleted",
    "deleted", "status", "changes-since", "ip", "ip6", "created_at", "block_device_mapping", "services",
    "metadata", "system_metadata", "info_cache", "security_groups", "pci_devices", "limit", "marker",
    "tags", "tags-any", "not-tags", "not-tags-any", "changes-before", "locked")


def _check_query_v275(params) -> None:
    unknown = sorted(k for k in set(params.keys()) if k not in _QUERY_V275 and not k.startswith("_"))
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        verb = "was" if len(unknown) == 1 else "were"
        raise exceptions.ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


# Nova's list sort keys (its query schema's enum; 400 for another) and those it accepts but ignores.
_SORT_KEYS = (
    "access_ip_v4", "access_ip_v6", "auto_disk_config", "availability_zone", "config_drive", "created_at",
    "display_description", "display_name", "host", "hostname", "image_ref", "instance_type_id", "kernel_id",
    "key_name", "launch_index", "launched_at", "locked_by", "node", "power_state", "progress", "project_id",
    "ramdisk_id", "root_device_name", "task_state", "terminated_at", "updated_at", "user_id", "uuid", "vm_state")
_IGNORED_SORT_KEYS = (
    "architecture", "cell_name", "cleaned", "default_ephemeral_device", "default_swap_device", "deleted",
    "deleted_at", "disable_terminate", "ephemeral_gb", "ephemeral_key_uuid", "id", "key_data", "launched_on",
    "locked", "memory_mb", "os_type", "reservation_id", "root_gb", "shutdown_terminate", "user_data", "vcpus",
    "vm_mode")
# Filters on joined tables (and names starting with "_"): Nova answers 400 for them.
_JOINED_TABLE_FILTERS = ("block_device_mapping", "services", "metadata", "system_metadata", "info_cache",
                         "security_groups", "pci_devices")


def _sort_keys(version) -> list[str]:
    if version.matches("2.75"):
        return sorted({*_SORT_KEYS, "locked"})  # the ignored ones are 400 from 2.75
    return sorted({*_SORT_KEYS, *_IGNORED_SORT_KEYS})  # "locked" a real key from 2.73


def list_query_schema(version) -> dict:
    """The query parameters of the server lists at ``version``: every name Nova's list takes (each
    a repeatable string unless said otherwise) but the filters on joined tables it always refuses,
    the sort keys it knows, and from 2.75 nothing else."""
    names = [n for n in _QUERY_V275 if n not in _JOINED_TABLE_FILTERS
             and (n not in _FILTER_SINCE or version.matches(_FILTER_SINCE[n]))]
    properties: dict = {name: {"type": "string"} for name in names}
    properties.update({
        "sort_key": {"type": "string", "enum": _sort_keys(version)},
        "sort_dir": {"type": "string", "enum": ["asc", "desc"]},
        "limit": {"type": "string", "pattern": "^[0-9]+$"},
        "changes-since": {"type": "string", "format": "date-time"},
    })
    if "changes-before" in properties:
        properties["changes-before"] = {"type": "string", "format": "date-time"}
    return query_schema(properties, strict=version.matches("2.75"))


LIST_QUERY = list_query_schema(microversion.MIN)
# The part of the list query the handler validates by schema; the other parameters keep Nova's own
# checks and messages (limit, the timestamps, the 2.75 refusal of unknown names).
_SCHEMA_CHECKED = ("sort_key",)


def _schema_checked(schema: dict) -> dict:
    return {"type": "object",
            "properties": {name: schema["properties"][name] for name in _SCHEMA_CHECKED}}


_LIST_QUERY_CHECKS = {"2.1": _schema_checked(LIST_QUERY),
                      "2.75": _schema_checked(list_query_schema(microversion.APIVersion.parse("2.75")))}


def _sort_params(params, version) -> tuple[list[str], list[str]]:
    """Nova's ``get_sort_params`` (created_at desc when none given), then the keys it accepts but
    ignores dropped with their direction (``remove_invalid_sort_keys``)."""
    keys = [k.strip() for k in params.getlist("sort_key")] or ["created_at"]
    dirs = [d.strip() for d in params.getlist("sort_dir")] or ["desc"]
    ignored = set(_IGNORED_SORT_KEYS) - ({"locked"} if version.matches("2.73") else set())
    for key in [k for k in keys if k in ignored]:
        if len(dirs) > keys.index(key):
            dirs.pop(keys.index(key))
        keys.remove(key)
    return keys, dirs


def _check_list_query(params, version, ctx, allowed: set[str] | None) -> None:
    """Nova's 400 and 403 answers to a list query, in Nova's order (``_get_servers``)."""
    validate_query(params, _LIST_QUERY_CHECKS["2.75" if version.matches("2.75") else "2.1"])
    for key in params.keys():
        if (key in _JOINED_TABLE_FILTERS or key.startswith("_")) and allowed is None:
            raise exceptions.ValidationError(f"Invalid filter field: {key}.")
    statuses = params.getlist("status")
    if statuses and not any(states.states_from_status(v) for v in statuses):
        if version.matches("2.38"):  # before 2.38 Nova lists nothing
            raise exceptions.ValidationError("Invalid status value")
    elif statuses and all(v.upper() == "DELETED" for v in statuses) and not ctx.is_admin:
        raise exceptions.NotAuthorized("Only administrators may list deleted instances")
    if params.get("all_tenants"):
        bool_from_string(params["all_tenants"], strict=True)
    if "locked" in params and (allowed is None or "locked" in allowed):
        bool_from_string(params["locked"], strict=True)
    for key in params.getlist("sort_key"):
        if key in ("host", "node") and not ctx.is_admin:
            raise exceptions.NotAuthorized(f"Only administrators can sort servers by {key}")


def _parse_list_query(request: Request, ctx, detailed: bool = False) -> tuple[dict, int | None, str | None]:
    params = request.query_params
    version = request.state.api_version
    if version.matches("2.75"):
        _check_query_v275(params)
    allowed = None if policy.check(ctx, "os_compute_api:servers:allow_all_filters") else _non_admin_filters(version)
    _check_list_query(params, version, ctx, allowed)
    filters: dict = {}
    if "all_tenants" in params and (params["all_tenants"] == "" or bool_from_string(params["all_tenants"])):
        # As Nova: asking for every project's servers is a policy decision (403), not a dropped filter.
        authorize(ctx, "os_compute_api:servers:%s:get_all_tenants" % ("detail" if detailed else "index"))
    for key in _LIST_FILTERS:
        if key not in params:
            continue
        if allowed is not None and key not in allowed:
            continue  # Nova silently drops filters the caller may not use (2.83 and 2.90 allow more)
        if key in _FILTER_SINCE and not version.matches(_FILTER_SINCE[key]):
            continue  # not a filter yet at this version: ignored, as Nova
        if key in ("tags", "tags-any", "not-tags", "not-tags-any"):
            filters[key] = [t.strip() for t in params[key].split(",") if t.strip()]
        elif key == "changes-before":
            filters[key] = common.parse_isotime(params[key], key)
        elif key == "status":
            filters["status"] = params.getlist("status")
        elif key == "changes-since":
            try:
                since = dt.datetime.fromisoformat(params[key].replace("Z", "+00:00"))
            except ValueError:
                raise exceptions.ValidationError(f"Invalid filter field: changes-since. "
                                                 f"'{params[key]}' is not an ISO 8601 date-time")
            if since.tzinfo is not None:
                since = since.astimezone(dt.timezone.utc).replace(tzinfo=None)
            filters["changes-since"] = since
        elif key == "all_tenants":
            filters["all_tenants"] = params[key] == "" or bool_from_string(params[key])
        elif key in ("tenant_id", "project_id"):
            # As Nova: a project filter only counts together with all_tenants (lp:#1185290).
            filters["project_id"] = params[key]
        elif key == "deleted":
            filters["deleted"] = params[key].lower() in ("true", "1")
        elif key == "locked":
            filters["locked"] = bool_from_string(params[key])
        else:
            filters[key] = params[key]
    if filters.get("changes-before") and filters.get("changes-since") and \
            filters["changes-before"] < filters["changes-since"]:
        raise exceptions.ValidationError("The value of changes-since must be less than or equal to "
                                         "changes-before.")
    limit = None
    if "limit" in params:
        try:
            limit = rest.parse_int64(params["limit"])
        except ValueError:
            raise exceptions.ValidationError("limit param must be an integer")
        if limit < 0:
            raise exceptions.ValidationError("limit param must be positive")
    return filters, limit, params.get("marker")


async def _host_statuses(request: Request, instances: list[dict]) -> None:
    """host_status (2.16): UP, DOWN, MAINTENANCE (disabled) or UNKNOWN, from the compute service."""
    from sqlalchemy import select

    from nefos.control.compute.services import is_up
    from nefos.db.models import Service
    hosts = {i["host"] for i in instances if i.get("host")}
    if not hosts:
        return
    rt = request.app.state.rt
    async with rt.db.reader() as s:
        rows = (await s.execute(select(Service).where(Service.host.in_(hosts), Service.binary == COMPUTE_BINARY,
                                                      Service.deleted == 0))).scalars().all()
    status = {r.host: ("MAINTENANCE" if r.disabled else "UP") if is_up(r, rt.cfg) else "DOWN" for r in rows}
    for i in instances:
        if i.get("host"):
            i["host_status"] = status.get(i["host"], "UNKNOWN")


async def _list(request: Request, detailed: bool):
    ctx = authorize(rest.get_context(request), "os_compute_api:servers:%s" % ("detail" if detailed else "index"))
    version = request.state.api_version
    filters, limit, marker = _parse_list_query(request, ctx, detailed)
    sort_keys, sort_dirs = _sort_params(request.query_params, version)
    instances = await _compute_api(request).list(ctx, filters=filters, limit=limit, marker=marker,
                                                 sort_keys=sort_keys, sort_dirs=sort_dirs)
    base = base_url(request)
    if detailed:
        if version.matches("2.16") and policy.check(ctx, "os_compute_api:servers:show:host_status"):
            await _host_statuses(request, instances)
        servers = [server_view.detail(i, base, version, ctx) for i in instances]
    else:
        servers = [server_view.basic(i, base) for i in instances]
    body: dict = {"servers": servers}
    if limit is not None and len(instances) == limit and instances:
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "marker"]
        query.append(("marker", instances[-1]["uuid"]))
        from urllib.parse import urlencode
        path = "servers/detail" if detailed else "servers"
        body["servers_links"] = [{"rel": "next", "href": f"{base}/v2.1/{path}?{urlencode(query)}"}]
    return body


@router.get("/v2.1/servers")
@documented(query=LIST_QUERY, responses={200: responses.SERVERS})
async def list_servers(request: Request):
    return await _list(request, detailed=False)


@router.get("/v2.1/servers/detail")
@documented(query=LIST_QUERY, responses={200: responses.SERVERS_DETAIL})
async def list_servers_detail(request: Request):
    return await _list(request, detailed=True)


async def show_view(request: Request, server_id: str) -> dict:
    ctx = authorize(rest.get_context(request), "os_compute_api:servers:show")
    version = request.state.api_version
    instance = await _compute_api(request).get(ctx, server_id)
    if version.matches("2.16") and policy.check(ctx, "os_compute_api:servers:show:host_status"):
        await _host_statuses(request, [instance])
    return server_view.detail(instance, base_url(request), version, ctx,
                              server_groups=await _server_groups(request, instance))


@router.get("/v2.1/servers/{server_id}")
@documented(responses={200: responses.SERVER_SHOWN})
async def show_server(request: Request, server_id: str):
    refuse_query_from_2102(request)
    return {"server": await show_view(request, server_id)}


@router.put("/v2.1/servers/{server_id}")
@documented(request=lambda: update_schema(microversion.MIN), responses={200: responses.SERVER_UPDATED})
async def update_server(request: Request, server_id: str):
    ctx = authorize(rest.get_context(request), "os_compute_api:servers:update")
    version = request.state.api_version
    body = await rest.json_body(request)
    validate(body, update_schema(version))
    server = body["server"]
    updates = {}
    for api_key, key in (("name", "name"), ("description", "description"), ("hostname", "hostname"),
                         ("accessIPv4", "access_ip_v4"), ("accessIPv6", "access_ip_v6")):
        if api_key in server:
            updates[key] = server[api_key]
            if api_key.startswith("access") and server[api_key]:
                updates[key] = _normalized_ip(server[api_key])
    if "OS-DCF:diskConfig" in server:
        updates["auto_disk_config"] = disk_config.from_api(server["OS-DCF:diskConfig"])
    pin = {key: server[key] for key in ("pinned_availability_zone",) if key in server}
    instance = await _compute_api(request).update(ctx, server_id, updates, **pin)
    # Before 2.75 the update answers with the narrower view (no OS-EXT-* attributes).
    if version.matches("2.75") and policy.check(ctx, "os_compute_api:servers:show:host_status"):
        await _host_statuses(request, [instance])
    return {"server": server_view.detail(instance, base_url(request), version, ctx,
                                         extended=version.matches("2.75"),
                                         server_groups=await _server_groups(request, instance))}


@router.delete("/v2.1/servers/{server_id}")
@documented(responses={204: responses.NO_BODY})
async def delete_server(request: Request, server_id: str):
    ctx = authorize(rest.get_context(request), "os_compute_api:servers:delete")
    await _compute_api(request).delete(ctx, server_id)
    return Response(status_code=204)
