"""JSON Schemas of the Compute API's success answers at microversion 2.1 (what a request without a
version header gets), for the OpenAPI document (``documented(responses=...)``) and the tests that
check every answer against it.

Written from the Compute API reference's field lists and from what the handlers build: keys Nova
always returns are required, nullable fields are ``[type, "null"]``, and an object is open
(``additionalProperties: true``) only where Nova's answer is (metadata, extra specs, a host's
services, ...). ``NO_BODY`` marks a success answered without a body.
"""

from __future__ import annotations

from typing import Any

NO_BODY = None

_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_INTEGER = {"type": "integer"}
_BOOLEAN = {"type": "boolean"}
# Nova's server timestamps ("2013-11-14T06:29:00Z"); the others ("2013-11-14T06:29:00.000000") carry
# no zone, so they are no RFC 3339 date-times and are left a plain string.
_SERVER_TIME = {"type": "string", "format": "date-time"}
_TIME = _STRING
_NULLABLE_TIME = _NULLABLE_STRING


def _object(properties: dict, required: tuple[str, ...] | list[str] = (), *, open_: bool = False) -> dict:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": open_}
    if required:
        schema["required"] = list(dict.fromkeys(required))
    return schema


def _array(items: dict, **bounds) -> dict:
    return {"type": "array", "items": items, **bounds}


def _all_required(properties: dict, *, open_: bool = False) -> dict:
    return _object(properties, tuple(properties), open_=open_)


_LINK = _object({"rel": _STRING, "href": {"type": "string", "format": "uri"}, "type": _STRING},
                ("rel", "href"))
_LINKS = _array(_LINK)
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}


# Versions -----------------------------------------------------------------------------------------

_VERSION_PROPERTIES = {"id": _STRING, "status": {"type": "string", "enum": ["CURRENT", "SUPPORTED", "DEPRECATED"]},
                       "version": _STRING, "min_version": _STRING, "updated": _SERVER_TIME, "links": _LINKS}
_MEDIA_TYPES = _array(_object({"base": _STRING, "type": _STRING}, ("base", "type")))
VERSIONS = _all_required({"versions": _array(_all_required(_VERSION_PROPERTIES), minItems=1)})
VERSION = _all_required({"version": _all_required({**_VERSION_PROPERTIES, "media-types": _MEDIA_TYPES})})


# Servers ------------------------------------------------------------------------------------------

SERVER_STATUSES = ["ACTIVE", "BUILD", "DELETED", "ERROR", "HARD_REBOOT", "MIGRATING", "PASSWORD", "PAUSED",
                   "REBOOT", "REBUILD", "RESCUE", "RESIZE", "REVERT_RESIZE", "SHELVED", "SHELVED_OFFLOADED",
                   "SHUTOFF", "SOFT_DELETED", "SUSPENDED", "UNKNOWN", "VERIFY_RESIZE"]
_ADDRESS = _object({"version": {"type": "integer", "enum": [4, 6]}, "addr": _STRING}, ("version", "addr"))
_EXTENDED_ADDRESS = _object({**_ADDRESS["properties"],
                             "OS-EXT-IPS:type": {"type": "string", "enum": ["fixed", "floating"]},
                             "OS-EXT-IPS-MAC:mac_addr": _NULLABLE_STRING},
                            ("version", "addr", "OS-EXT-IPS:type", "OS-EXT-IPS-MAC:mac_addr"))
# Addresses by network label.
ADDRESSES = {"type": "object", "additionalProperties": _array(_ADDRESS)}
_EXTENDED_ADDRESSES = {"type": "object", "additionalProperties": _array(_EXTENDED_ADDRESS)}
_BOOKMARKED = _all_required({"id": _STRING, "links": _LINKS})
_SERVER_IMAGE = {"anyOf": [{"type": "string", "maxLength": 0}, _BOOKMARKED]}  # "": booted from a volume
_FAULT = _object({"code": _INTEGER, "created": _SERVER_TIME, "message": _STRING, "details": _STRING},
                 ("code", "created", "message"))
_SERVER_BASE = {
    "id": {"type": "string", "format": "uuid"},
    "name": _STRING,
    "status": {"type": "string", "enum": SERVER_STATUSES},
    "tenant_id": _STRING,
    "user_id": _STRING,
    "metadata": _STRING_MAP,
    "hostId": _STRING,
    "image": _SERVER_IMAGE,
    "flavor": _BOOKMARKED,
    "created": _SERVER_TIME,
    "updated": _SERVER_TIME,
    "addresses": ADDRESSES,
    "accessIPv4": _STRING,
    "accessIPv6": _STRING,
    "links": _LINKS,
    "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]},
}
_SERVER_OPTIONAL = {"progress": _INTEGER, "fault": _FAULT}
# What show and the detailed list add (Nova's extended attributes; the OS-EXT-SRV-ATTR ones for admins).
_SERVER_EXTENDED = {
    "addresses": _EXTENDED_ADDRESSES,
    "OS-EXT-AZ:availability_zone": _STRING,
    "config_drive": _STRING,
    "key_name": _NULLABLE_STRING,
    "OS-SRV-USG:launched_at": _NULLABLE_TIME,
    "OS-SRV-USG:terminated_at": _NULLABLE_TIME,
    "OS-EXT-STS:task_state": _NULLABLE_STRING,
    "OS-EXT-STS:vm_state": _STRING,
    "OS-EXT-STS:power_state": _INTEGER,
    "os-extended-volumes:volumes_attached": _array(_object({"id": _STRING}, ("id",))),
}
_SERVER_EXTENDED_OPTIONAL = {
    "security_groups": _array(_object({"name": _STRING}, ("name",))),
    "OS-EXT-SRV-ATTR:host": _NULLABLE_STRING,
    "OS-EXT-SRV-ATTR:instance_name": _STRING,
    "OS-EXT-SRV-ATTR:hypervisor_hostname": _NULLABLE_STRING,
}
SERVER = _object({**_SERVER_BASE, **_SERVER_EXTENDED, **_SERVER_OPTIONAL, **_SERVER_EXTENDED_OPTIONAL},
                 [*_SERVER_BASE, *_SERVER_EXTENDED])
# Update and rebuild answer with the narrower view before 2.75 (no extended attributes).
SERVER_NARROW = _object({**_SERVER_BASE, **_SERVER_OPTIONAL}, list(_SERVER_BASE))
_ADMIN_PASS = {"adminPass": _STRING}  # absent with enable_instance_password off (Nova's)

SERVER_CREATED = {"anyOf": [
    _all_required({"server": _object({"id": _SERVER_BASE["id"], "links": _LINKS,
                                      "OS-DCF:diskConfig": _SERVER_BASE["OS-DCF:diskConfig"],
                                      "security_groups": _SERVER_EXTENDED_OPTIONAL["security_groups"],
                                      **_ADMIN_PASS},
                                     ("id", "links", "OS-DCF:diskConfig"))}),
    _all_required({"reservation_id": {"type": "string", "pattern": "^r-"}}),  # return_reservation_id
]}
SERVERS = _object({"servers": _array(_all_required({"id": _SERVER_BASE["id"], "name": _STRING,
                                                    "links": _LINKS})),
                   "servers_links": _LINKS}, ("servers",))
SERVERS_DETAIL = _object({"servers": _array(SERVER), "servers_links": _LINKS}, ("servers",))
SERVER_SHOWN = _all_required({"server": SERVER})
SERVER_UPDATED = _all_required({"server": SERVER_NARROW})
SERVER_REBUILT = _all_required({"server": _object({**SERVER_NARROW["properties"], **_ADMIN_PASS},
                                                  SERVER_NARROW["required"])})
CONSOLE_OUTPUT = _all_required({"output": _STRING})
_URI = {"type": "string", "format": "uri"}
# os-getVNCConsole (2.1 to 2.5), os-remote-consoles (2.6), os-console-auth-tokens (2.31, admin).
VNC_CONSOLE = _all_required({"console": _all_required({
    "type": {"type": "string", "enum": ["novnc", "xvpvnc"]}, "url": _URI})})
REMOTE_CONSOLE = _all_required({"remote_console": _all_required({
    "protocol": {"type": "string", "enum": ["vnc", "spice", "serial", "rdp", "mks"]},
    "type": {"type": "string", "enum": ["novnc", "xvpvnc", "spice-html5", "spice-direct", "serial",
                                        "rdp-html5", "webmks"]},
    "url": _URI})})
# tls_port: spice-direct tokens' only, from 2.99.
CONSOLE_AUTH_TOKEN = _all_required({"console": _object({
    "instance_uuid": {"type": "string", "format": "uuid"}, "host": _NULLABLE_STRING, "port": _INTEGER,
    "tls_port": {"type": ["integer", "null"]}, "internal_access_path": _NULLABLE_STRING},
    ("instance_uuid", "host", "port", "internal_access_path"))})
# The actions answering 202 with a body, by action (the others answer 202 or 204 without one).
ACTION_BODIES = {"rebuild": SERVER_REBUILT}
# The rescue action's 200 (Nova's, with the password unless enable_instance_password is off).
RESCUE = {"type": "object", "properties": {"adminPass": _STRING}, "additionalProperties": False}
# The evacuate action's 200 below 2.14 (Nova's: the password, null when the disk is kept on shared storage).
EVACUATE = {"type": "object", "properties": {"adminPass": {"type": ["string", "null"]}}, "additionalProperties": False}

METADATA = _all_required({"metadata": _STRING_MAP})
METADATA_ITEM = _all_required({"meta": {**_STRING_MAP, "minProperties": 1, "maxProperties": 1}})
TAGS = _all_required({"tags": _array(_STRING)})
TOPOLOGY = _all_required({"nodes": _array({"type": "object"}), "pagesize_kb": {"type": ["integer", "null"]}})
SERVER_ADDRESSES = _all_required({"addresses": ADDRESSES})
# One network's addresses, keyed by its label.
NETWORK_ADDRESSES = {"type": "object", "minProperties": 1, "maxProperties": 1,
                     "additionalProperties": _array(_ADDRESS)}

_INTERFACE_ATTACHMENT = _object({
    "net_id": _STRING, "port_id": _STRING, "mac_addr": _STRING, "port_state": _STRING,
    "fixed_ips": _array(_all_required({"subnet_id": _STRING, "ip_address": _STRING})),
    "tag": _NULLABLE_STRING}, ("net_id", "port_id", "mac_addr", "port_state", "fixed_ips"))
INTERFACE_ATTACHMENT = _all_required({"interfaceAttachment": _INTERFACE_ATTACHMENT})
INTERFACE_ATTACHMENTS = _all_required({"interfaceAttachments": _array(_INTERFACE_ATTACHMENT)})
_ACTION = _all_required({"action": _STRING, "instance_uuid": _STRING, "request_id": _STRING,
                         "user_id": _NULLABLE_STRING, "project_id": _NULLABLE_STRING, "start_time": _TIME,
                         "message": _NULLABLE_STRING})
INSTANCE_ACTIONS = _all_required({"instanceActions": _array(_ACTION)})
_ACTION_EVENT = _object({"event": _STRING, "start_time": _NULLABLE_TIME, "finish_time": _NULLABLE_TIME,
                         "result": _NULLABLE_STRING, "traceback": _NULLABLE_STRING},
                        ("event", "start_time", "finish_time", "result"))
INSTANCE_ACTION = _all_required({"instanceAction": _object(
    {**_ACTION["properties"], "events": _array(_ACTION_EVENT)}, _ACTION["required"])})


# Images (the proxy, below 2.36) ---------------------------------------------------------------------

_IMAGE_BRIEF = _all_required({"id": _STRING, "name": _NULLABLE_STRING, "links": _LINKS})
_IMAGE_TIME = {"type": ["string", "null"], "format": "date-time"}
IMAGE_STATUSES = ["ACTIVE", "SAVING", "DELETED", "ERROR", "UNKNOWN"]
_IMAGE = _object({
    "id": _STRING, "name": _NULLABLE_STRING, "minRam": _INTEGER, "minDisk": _INTEGER,
    # The image's properties: strings, but the JSON-encoded ones Nova decodes (block_device_mapping).
    "metadata": {"type": "object"},
    "created": _IMAGE_TIME, "updated": _IMAGE_TIME, "status": {"type": "string", "enum": IMAGE_STATUSES},
    "progress": {"type": "integer", "enum": [0, 25, 50, 100]}, "OS-EXT-IMG-SIZE:size": _INTEGER,
    "links": _LINKS, "server": _all_required({"id": _STRING, "links": _LINKS}),
    "OS-DCF:diskConfig": {"type": "string", "enum": ["AUTO", "MANUAL"]}},
    ("id", "name", "minRam", "minDisk", "metadata", "created", "updated", "status", "progress",
     "OS-EXT-IMG-SIZE:size", "links"))
IMAGES = _object({"images": _array(_IMAGE_BRIEF), "images_links": _LINKS}, ("images",))
IMAGES_DETAIL = _object({"images": _array(_IMAGE), "images_links": _LINKS}, ("images",))
IMAGE = _all_required({"image": _IMAGE})


# Flavors ------------------------------------------------------------------------------------------

_FLAVOR_BRIEF = _all_required({"id": _STRING, "name": _STRING, "links": _LINKS})
FLAVOR = _all_required({
    "id": _STRING, "name": _STRING, "ram": _INTEGER, "disk": _INTEGER,
    "swap": {"anyOf": [_INTEGER, {"type": "string", "maxLength": 0}]},  # "" for none before 2.75
    "OS-FLV-EXT-DATA:ephemeral": _INTEGER, "OS-FLV-DISABLED:disabled": _BOOLEAN, "vcpus": _INTEGER,
    "os-flavor-access:is_public": _BOOLEAN, "rxtx_factor": {"type": "number"}, "links": _LINKS})
FLAVORS = _object({"flavors": _array(_FLAVOR_BRIEF), "flavors_links": _LINKS}, ("flavors",))
FLAVORS_DETAIL = _object({"flavors": _array(FLAVOR), "flavors_links": _LINKS}, ("flavors",))
FLAVOR_SHOWN = _all_required({"flavor": FLAVOR})
EXTRA_SPECS = _all_required({"extra_specs": _STRING_MAP})
EXTRA_SPEC = {**_STRING_MAP, "minProperties": 1, "maxProperties": 1}
FLAVOR_ACCESS = _all_required({"flavor_access": _array(_all_required({"flavor_id": _STRING,
                                                                      "tenant_id": _STRING}))})


# Key pairs ----------------------------------------------------------------------------------------

_KEYPAIR_BRIEF = {"name": _STRING, "public_key": _STRING, "fingerprint": _STRING}
KEYPAIRS = _object({"keypairs": _array(_all_required({"keypair": _all_required(_KEYPAIR_BRIEF)})),
                    "keypairs_links": _LINKS}, ("keypairs",))
KEYPAIR = _all_required({"keypair": _all_required({
    **_KEYPAIR_BRIEF, "user_id": _STRING, "deleted": _BOOLEAN, "created_at": _TIME,
    "updated_at": _NULLABLE_TIME, "deleted_at": _NULLABLE_TIME, "id": _INTEGER})})
KEYPAIR_CREATED = _all_required({"keypair": _object(
    {**_KEYPAIR_BRIEF, "user_id": _STRING, "private_key": _STRING}, [*_KEYPAIR_BRIEF, "user_id"])})


# Limits, availability zones, services, hypervisors ------------------------------------------------

_ABSOLUTE_LIMITS_AT_21 = ("maxTotalRAMSize", "maxTotalInstances", "maxTotalCores", "maxTotalKeypairs",
                          "maxTotalFloatingIps", "maxServerMeta", "maxImageMeta", "maxPersonality",
                          "maxPersonalitySize", "maxSecurityGroups", "maxSecurityGroupRules", "maxServerGroups",
                          "maxServerGroupMembers", "totalInstancesUsed", "totalCoresUsed", "totalRAMUsed",
                          "totalFloatingIpsUsed", "totalSecurityGroupsUsed", "totalServerGroupsUsed")
LIMITS = _all_required({"limits": _all_required({
    "rate": _array({"type": "object"}, maxItems=0),  # no rate limits, as Nova
    "absolute": _object({name: _INTEGER for name in _ABSOLUTE_LIMITS_AT_21}, _ABSOLUTE_LIMITS_AT_21)})})

_SERVICE_STATE = _all_required({"available": _BOOLEAN, "active": _BOOLEAN, "updated_at": _NULLABLE_TIME})
_ZONE = _all_required({
    "zoneName": _STRING, "zoneState": _all_required({"available": _BOOLEAN}),
    # Hosts by name, each its services' states by binary (the detailed list; null otherwise).
    "hosts": {"type": ["object", "null"], "additionalProperties": {
        "type": "object", "additionalProperties": _SERVICE_STATE}}})
AVAILABILITY_ZONES = _all_required({"availabilityZoneInfo": _array(_ZONE)})

_UP_DOWN = {"type": "string", "enum": ["up", "down"]}
_ENABLED = {"type": "string", "enum": ["enabled", "disabled"]}
_SERVICE = _all_required({"binary": _STRING, "host": _STRING, "id": _INTEGER, "zone": _STRING,
                          "status": _ENABLED, "state": _UP_DOWN, "updated_at": _NULLABLE_TIME,
                          "disabled_reason": _NULLABLE_STRING})
SERVICES = _all_required({"services": _array(_SERVICE)})
SERVICE_UPDATED = _all_required({"service": _object(
    {"host": _STRING, "binary": _STRING, "status": _ENABLED, "disabled_reason": _STRING},
    ("host", "binary", "status"))})

# Host aggregates: every field of Nova's Aggregate object (``uuid`` from 2.41); create's answer
# has neither ``hosts`` nor ``metadata``.
_AGGREGATE_BRIEF = {"id": _INTEGER, "name": _STRING, "availability_zone": _NULLABLE_STRING,
                    "created_at": _TIME, "updated_at": _NULLABLE_TIME, "deleted_at": _NULLABLE_TIME,
                    "deleted": _BOOLEAN}
_AGGREGATE_OPTIONAL = {"uuid": _STRING}
_AGGREGATE_FULL = {**_AGGREGATE_BRIEF, "hosts": _array(_STRING),
                   "metadata": {"type": "object", "additionalProperties": _STRING}}
_AGGREGATE = _object({**_AGGREGATE_FULL, **_AGGREGATE_OPTIONAL}, tuple(_AGGREGATE_FULL))
AGGREGATE = _all_required({"aggregate": _AGGREGATE})
AGGREGATE_CREATED = _all_required({"aggregate": _object({**_AGGREGATE_BRIEF, **_AGGREGATE_OPTIONAL},
                                                        tuple(_AGGREGATE_BRIEF))})
AGGREGATES = _all_required({"aggregates": _array(_AGGREGATE)})

_HYPERVISOR_BRIEF = {"id": _INTEGER, "hypervisor_hostname": _STRING, "state": _UP_DOWN, "status": _ENABLED}
_HYPERVISOR_SERVERS = _array(_all_required({"uuid": _STRING, "name": _STRING}))
_RESOURCES = ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used", "free_ram_mb",
              "free_disk_gb", "current_workload", "running_vms", "disk_available_least")
_HYPERVISOR = _object({
    **_HYPERVISOR_BRIEF, "hypervisor_type": _STRING, "hypervisor_version": _INTEGER, "host_ip": _NULLABLE_STRING,
    "service": _all_required({"id": _INTEGER, "host": _STRING, "disabled_reason": _NULLABLE_STRING}),
    **{name: {"type": ["integer", "null"]} for name in _RESOURCES},
    "cpu_info": _STRING,  # a JSON document in a string before 2.28
}, [*_HYPERVISOR_BRIEF, "hypervisor_type", "hypervisor_version", "host_ip", "service", *_RESOURCES, "cpu_info"])
HYPERVISORS = _object({"hypervisors": _array(_all_required(_HYPERVISOR_BRIEF)), "hypervisors_links": _LINKS},
                      ("hypervisors",))
HYPERVISORS_DETAIL = _object({"hypervisors": _array(_HYPERVISOR), "hypervisors_links": _LINKS}, ("hypervisors",))
HYPERVISOR = _all_required({"hypervisor": _HYPERVISOR})
HYPERVISOR_STATISTICS = _all_required({"hypervisor_statistics": _all_required(
    {"count": _INTEGER, **{name: _INTEGER for name in _RESOURCES}})})
HYPERVISOR_UPTIME = _all_required({"hypervisor": _all_required({**_HYPERVISOR_BRIEF, "uptime": _STRING})})
HYPERVISOR_SERVERS = _all_required({"hypervisors": _array(_object(
    {**_HYPERVISOR_BRIEF, "servers": _HYPERVISOR_SERVERS}, tuple(_HYPERVISOR_BRIEF)))})
# GET /v2.1/nefos-events (text/event-stream): Server-Sent Events, one message per event.
EVENT_STREAM = {"type": "string", "description": "Server-Sent Events: one message per event (id: its id in "
                "the log, event: its type, data: a JSON object), and the stream's own messages, without an id: "
                "stream.connected first (last_event_id), stream.truncated (last_event_id, oldest_kept), "
                "stream.overflow, and stream.closed last when the caller's authority is gone (reason: "
                "token_expired, unauthorized, forbidden or unavailable; message)."}

HYPERVISOR_HEALTH = _all_required({"hypervisor_health": _array(_all_required({
    "host": _STRING, "state": _UP_DOWN, "status": _ENABLED, "disabled_reason": _NULLABLE_STRING,
    "hypervisor_connection": _STRING, "hypervisor_connection_since": _NULLABLE_STRING,
    "hypervisor_connection_reason": _NULLABLE_STRING,
    "vif_plugging_waits": {"type": ["object", "null"], "additionalProperties": True}}))})


# Quotas, server groups, external events -----------------------------------------------------------

QUOTA_RESOURCES_AT_21 = ("instances", "cores", "ram", "metadata_items", "key_pairs", "server_groups",
                         "server_group_members", "floating_ips", "fixed_ips", "security_groups",
                         "security_group_rules", "injected_files", "injected_file_content_bytes",
                         "injected_file_path_bytes")
QUOTA_CLASS_RESOURCES_AT_21 = tuple(r for r in QUOTA_RESOURCES_AT_21
                                    if r not in ("server_groups", "server_group_members"))
_QUOTAS = {name: _INTEGER for name in QUOTA_RESOURCES_AT_21}
QUOTA_SET = _all_required({"quota_set": _all_required({"id": _STRING, **_QUOTAS})})
QUOTA_SET_UPDATED = _all_required({"quota_set": _all_required(_QUOTAS)})
QUOTA_SET_DETAIL = _all_required({"quota_set": _all_required({"id": _STRING, **{
    name: _all_required({"limit": _INTEGER, "in_use": _INTEGER, "reserved": _INTEGER})
    for name in QUOTA_RESOURCES_AT_21}})})
_CLASS_QUOTAS = {name: _INTEGER for name in QUOTA_CLASS_RESOURCES_AT_21}
QUOTA_CLASS_SET = _all_required({"quota_class_set": _all_required({"id": _STRING, **_CLASS_QUOTAS})})
QUOTA_CLASS_SET_UPDATED = _all_required({"quota_class_set": _all_required(_CLASS_QUOTAS)})

SERVER_GROUP = _all_required({"id": _STRING, "name": _STRING, "members": _array(_STRING),
                              "policies": _array(_STRING, maxItems=1), "metadata": _object({})})
SERVER_GROUPS = _all_required({"server_groups": _array(SERVER_GROUP)})
SERVER_GROUP_SHOWN = _all_required({"server_group": SERVER_GROUP})

# Each event as sent, answered with its own status and code (200, 400, 404 or 422).
EXTERNAL_EVENTS = _all_required({"events": _array(_object({
    "server_uuid": _STRING, "name": _STRING, "tag": _STRING,
    "status": {"type": "string", "enum": ["failed", "completed", "in-progress"]},
    "code": {"type": "integer", "enum": [200, 400, 404, 422]}}, ("server_uuid", "name", "status", "code")),
    minItems=1)})

# Extensions, os-hosts, diagnostics, server password, volume attachments ---------------------------

_EXTENSION = _all_required({"alias": _STRING, "description": _STRING, "links": _LINKS, "name": _STRING,
                            "namespace": {"type": "string", "format": "uri"}, "updated": _SERVER_TIME})
EXTENSIONS = _all_required({"extensions": _array(_EXTENSION)})
EXTENSION = _all_required({"extension": _EXTENSION})

HOSTS = _all_required({"hosts": _array(_all_required({"host_name": _STRING, "service": _STRING,
                                                      "zone": _STRING}))})
HOST_RESOURCES = _all_required({"host": _array(_all_required({"resource": _all_required({
    "host": _STRING, "project": _STRING, "cpu": _INTEGER, "memory_mb": _INTEGER, "disk_gb": _INTEGER})}))})
HOST_UPDATED = _object({"host": _STRING, "status": {"type": "string", "enum": ["enabled", "disabled"]},
                        "maintenance_mode": {"type": "string", "enum": ["on_maintenance", "off_maintenance"]}},
                       ("host",))
HOST_POWER_ACTION = _all_required({"host": _STRING, "power_action": {}})

# Before 2.48 each driver's own keys (Nova's free-form dict of figures).
DIAGNOSTICS = {"type": "object", "additionalProperties": True}
_NULLABLE_INTEGER = {"type": ["integer", "null"]}
DIAGNOSTICS_V248 = _all_required({
    "state": {"type": "string", "enum": ["pending", "running", "paused", "shutdown", "crashed", "suspended"]},
    "driver": _STRING, "hypervisor": _NULLABLE_STRING, "hypervisor_os": _NULLABLE_STRING,
    "uptime": _NULLABLE_INTEGER, "config_drive": _BOOLEAN, "num_cpus": _INTEGER, "num_nics": _INTEGER,
    "num_disks": _INTEGER,
    "memory_details": _all_required({"maximum": _NULLABLE_INTEGER, "used": _NULLABLE_INTEGER}),
    "cpu_details": _array(_all_required({"id": _NULLABLE_INTEGER, "time": _NULLABLE_INTEGER,
                                         "utilisation": _NULLABLE_INTEGER})),
    "nic_details": _array(_all_required({"mac_address": _NULLABLE_STRING, **{
        f"{way}_{name}": _NULLABLE_INTEGER for way in ("rx", "tx")
        for name in ("octets", "errors", "drop", "packets", "rate")}})),
    "disk_details": _array(_all_required({name: _NULLABLE_INTEGER for name in (
        "read_bytes", "read_requests", "write_bytes", "write_requests", "errors_count")})),
})

SERVER_PASSWORD = _all_required({"password": _STRING})

VOLUME_ATTACHMENTS = _all_required({"volumeAttachments": _array(_object(
    {"id": _STRING, "serverId": _STRING, "volumeId": _STRING, "device": _NULLABLE_STRING},
    ("serverId", "volumeId"), open_=True))})
VOLUME_ATTACHMENT = _all_required({"volumeAttachment": VOLUME_ATTACHMENTS["properties"]["volumeAttachments"]["items"]})
_VOLUME = _object({"id": _STRING, "status": _STRING, "size": _INTEGER, "availabilityZone": _NULLABLE_STRING,
                   "createdAt": _STRING, "displayName": _NULLABLE_STRING, "displayDescription": _NULLABLE_STRING,
                   "volumeType": _NULLABLE_STRING, "snapshotId": _NULLABLE_STRING, "metadata": _STRING_MAP,
                   "attachments": _array({"type": "object"})}, ("id", "status", "size"))
VOLUMES = _all_required({"volumes": _array(_VOLUME)})
VOLUME = _all_required({"volume": _VOLUME})
_SNAPSHOT = _object({"id": _STRING, "volumeId": _STRING, "status": _STRING, "size": _INTEGER,
                     "createdAt": _STRING, "displayName": _NULLABLE_STRING,
                     "displayDescription": _NULLABLE_STRING}, ("id", "volumeId", "status", "size"))
SNAPSHOTS = _all_required({"snapshots": _array(_SNAPSHOT)})
SNAPSHOT = _all_required({"snapshot": _SNAPSHOT})

# The network proxy APIs (up to 2.35) -----------------------------------------------------------------

_PORT_NUMBER = {"type": ["integer", "null"], "minimum": -1}
SECURITY_GROUP_RULE_VIEW = _all_required({
    "id": _STRING, "parent_group_id": _STRING, "ip_protocol": _NULLABLE_STRING,
    "from_port": _PORT_NUMBER, "to_port": _PORT_NUMBER,
    "group": _object({"name": _NULLABLE_STRING, "tenant_id": _NULLABLE_STRING}),
    "ip_range": _object({"cidr": _STRING})})
_SECURITY_GROUP_VIEW = _all_required({"id": _STRING, "name": _STRING, "description": _NULLABLE_STRING,
                                      "tenant_id": _NULLABLE_STRING, "rules": _array(SECURITY_GROUP_RULE_VIEW)})
SECURITY_GROUP = _all_required({"security_group": _SECURITY_GROUP_VIEW})
SECURITY_GROUPS = _all_required({"security_groups": _array(_SECURITY_GROUP_VIEW)})
SECURITY_GROUP_RULE = _all_required({"security_group_rule": SECURITY_GROUP_RULE_VIEW})

# os-networks: only id and label are known with Neutron; the nova-network fields are null (the
# admin-only ones shown to admins only).
NETWORK_FIELDS = ("id", "cidr", "netmask", "gateway", "broadcast", "dns1", "dns2", "cidr_v6", "gateway_v6",
                  "label", "netmask_v6")
NETWORK_ADMIN_FIELDS = ("created_at", "updated_at", "deleted_at", "deleted", "injected", "bridge", "vlan",
                        "vpn_public_address", "vpn_public_port", "vpn_private_address", "dhcp_start",
                        "project_id", "host", "bridge_interface", "multi_host", "priority", "rxtx_base", "mtu",
                        "dhcp_server", "enable_dhcp", "share_address")
_NETWORK_VIEW = _object({**{name: _NULLABLE_STRING for name in NETWORK_FIELDS + NETWORK_ADMIN_FIELDS},
                         "id": _STRING, "label": _STRING,
                         "mtu": {"type": ["integer", "null"]}, "vpn_public_port": {"type": ["integer", "null"]}},
                        NETWORK_FIELDS)
NETWORK = _all_required({"network": _NETWORK_VIEW})
NETWORKS = _all_required({"networks": _array(_NETWORK_VIEW)})
_TENANT_NETWORK_VIEW = _all_required({"id": _STRING, "cidr": _STRING, "label": _STRING})
TENANT_NETWORK = _all_required({"network": _TENANT_NETWORK_VIEW})
TENANT_NETWORKS = _all_required({"networks": _array(_TENANT_NETWORK_VIEW)})

_FLOATING_IP_VIEW = _all_required({"id": _STRING, "ip": _STRING, "fixed_ip": _NULLABLE_STRING,
                                   "instance_id": _NULLABLE_STRING, "pool": _STRING})
FLOATING_IP = _all_required({"floating_ip": _FLOATING_IP_VIEW})
FLOATING_IPS = _all_required({"floating_ips": _array(_FLOATING_IP_VIEW)})
FLOATING_IP_POOLS = _all_required({"floating_ip_pools": _array(_all_required({"name": _STRING}))})

# Usage, audit log, migrations ----------------------------------------------------------------------

_NUMBER = {"type": "number"}
_SERVER_USAGE = _object({
    "ended_at": _NULLABLE_TIME, "flavor": _STRING, "hours": _NUMBER, "instance_id": _STRING,
    "local_gb": _INTEGER, "memory_mb": _INTEGER, "name": _NULLABLE_STRING, "started_at": _TIME,
    "state": _STRING, "tenant_id": _STRING, "uptime": _INTEGER, "vcpus": _INTEGER},
    ("ended_at", "flavor", "hours", "instance_id", "name", "state", "started_at", "tenant_id", "uptime"))
_TENANT_USAGE_PROPERTIES = {
    "server_usages": _array(_SERVER_USAGE), "start": _TIME, "stop": _TIME, "tenant_id": _STRING,
    "total_hours": _NUMBER, "total_local_gb_usage": _NUMBER, "total_memory_mb_usage": _NUMBER,
    "total_vcpus_usage": _NUMBER}
_TENANT_USAGE_REQUIRED = ("start", "stop", "tenant_id", "total_hours", "total_local_gb_usage",
                          "total_memory_mb_usage", "total_vcpus_usage")
TENANT_USAGES = _object({"tenant_usages": _array(_object(_TENANT_USAGE_PROPERTIES, _TENANT_USAGE_REQUIRED)),
                         "tenant_usages_links": _LINKS}, ("tenant_usages",))
# A project without usage in the period: an empty object, as Nova.
TENANT_USAGE = _object({"tenant_usage": {"oneOf": [
    _object(_TENANT_USAGE_PROPERTIES, (*_TENANT_USAGE_REQUIRED, "server_usages")), _object({})]},
    "tenant_usage_links": _LINKS}, ("tenant_usage",))

_AUDIT_LOG = _all_required({
    "hosts_not_run": _array(_STRING),
    "log": {"type": "object", "additionalProperties": _object(
        {"instances": _INTEGER, "errors": _INTEGER, "message": _STRING,
         "state": {"type": "string", "enum": ["RUNNING", "DONE"]}})},
    "num_hosts": _INTEGER, "num_hosts_done": _INTEGER, "num_hosts_not_run": _INTEGER,
    "num_hosts_running": _INTEGER, "overall_status": _STRING, "period_beginning": _STRING,
    "period_ending": _STRING, "total_errors": _INTEGER, "total_instances": _INTEGER})
INSTANCE_USAGE_AUDIT_LOGS = _all_required({"instance_usage_audit_logs": _AUDIT_LOG})
INSTANCE_USAGE_AUDIT_LOG = _all_required({"instance_usage_audit_log": _AUDIT_LOG})

_MIGRATION_TYPES = {"type": "string", "enum": ["migration", "resize", "live-migration", "evacuation"]}
# 2.23 adds migration_type (and links for a live migration in progress), 2.59 uuid, 2.80 user_id
# and project_id.
_MIGRATION = _object({
    "created_at": _TIME, "dest_compute": _NULLABLE_STRING, "dest_host": _NULLABLE_STRING,
    "dest_node": _NULLABLE_STRING, "id": _INTEGER, "instance_uuid": _STRING,
    "new_instance_type_id": {"type": ["integer", "null"]}, "old_instance_type_id": {"type": ["integer", "null"]},
    "source_compute": _NULLABLE_STRING, "source_node": _NULLABLE_STRING, "status": _STRING,
    "updated_at": _NULLABLE_TIME, "migration_type": _MIGRATION_TYPES, "links": _LINKS, "uuid": _STRING,
    "user_id": _NULLABLE_STRING, "project_id": _NULLABLE_STRING},
    ("created_at", "dest_compute", "dest_host", "dest_node", "id", "instance_uuid", "new_instance_type_id",
     "old_instance_type_id", "source_compute", "source_node", "status", "updated_at"))
MIGRATIONS = _object({"migrations": _array(_MIGRATION), "migrations_links": _LINKS}, ("migrations",))
_SERVER_MIGRATION = _object({
    "created_at": _TIME, "dest_compute": _NULLABLE_STRING, "dest_host": _NULLABLE_STRING,
    "dest_node": _NULLABLE_STRING, "disk_processed_bytes": {"type": ["integer", "null"]},
    "disk_remaining_bytes": {"type": ["integer", "null"]}, "disk_total_bytes": {"type": ["integer", "null"]},
    "id": _INTEGER, "memory_processed_bytes": {"type": ["integer", "null"]},
    "memory_remaining_bytes": {"type": ["integer", "null"]}, "memory_total_bytes": {"type": ["integer", "null"]},
    "server_uuid": _STRING, "source_compute": _NULLABLE_STRING, "source_node": _NULLABLE_STRING,
    "status": _STRING, "updated_at": _NULLABLE_TIME, "uuid": _STRING, "user_id": _NULLABLE_STRING,
    "project_id": _NULLABLE_STRING},
    ("created_at", "dest_compute", "dest_host", "dest_node", "disk_processed_bytes", "disk_remaining_bytes",
     "disk_total_bytes", "id", "memory_processed_bytes", "memory_remaining_bytes", "memory_total_bytes",
     "server_uuid", "source_compute", "source_node", "status", "updated_at"))
SERVER_MIGRATIONS = _all_required({"migrations": _array(_SERVER_MIGRATION)})
SERVER_MIGRATION = _all_required({"migration": _SERVER_MIGRATION})
