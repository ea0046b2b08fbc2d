"""Request validation for the Networking API resources, shared by REST and bus callers.

Each resource declares its attributes: whether they may be given on create
(``post``) or update (``put``), their default and their validator. A bad
body raises ``ValidationError`` (rendered as Neutron's ``HTTPBadRequest``)
naming the attribute: ``Invalid input for cidr. Reason: ...``. The shape checks of values (a
string and its length, a list, a dictionary, one of a set of choices) are JSON Schema, through
the shared validator (``nefos.validation``); the validators that convert what they accept
(integers and booleans given as strings, addresses, UUIDs, MACs) check in Python.
"""

from __future__ import annotations

import ipaddress
import re
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, Callable

from nefos import exceptions, rest, validation

REQUIRED = object()
UNSET = object()

VNIC_TYPES = ("normal", "direct", "macvtap", "baremetal", "direct-physical", "virtio-forwarder",
              "smart-nic", "vdpa", "remote-managed", "accelerator-direct",
              "accelerator-direct-physical")
IPV6_MODES = ("slaac", "dhcpv6-stateful", "dhcpv6-stateless")
PORT_STATUSES = ("ACTIVE", "DOWN", "BUILD", "ERROR")
PROTOCOL_NAMES = {
    "ah": 51, "dccp": 33, "egp": 8, "esp": 50, "gre": 47, "hopopt": 0, "icmp": 1, "igmp": 2,
    "ipip": 4, "ipv6-encap": 41, "ipv6-frag": 44, "ipv6-icmp": 58, "icmpv6": 58, "ipv6-nonxt": 59,
    "ipv6-opts": 60, "ipv6-route": 43, "ospf": 89, "pgm": 113, "rsvp": 46, "sctp": 132, "tcp": 6,
    "udp": 17, "udplite": 136, "vrrp": 112,
}
_MAC_RE = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$", re.I)


def bad(attr: str, reason: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(f"Invalid input for {attr}. Reason: {reason}.")


def bad_request(message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(message)


# Validators: (value, attribute name) -> normalised value, or raise bad(...) ----------------

def _described(check: Callable, schema: dict) -> Callable:
    """A validator with the JSON Schema of the values it takes (for the OpenAPI document)."""
    check.json_schema = schema
    return check


_LIST = {"type": "array"}
_DICT = {"type": "object"}


def _checked(value, attr: str, schema: dict, reason: Callable[[str], str]):
    """``value`` when it fits ``schema`` (through the shared validator); else Neutron's 400 for
    ``attr``, its reason ``reason(keyword)`` of the schema keyword that failed."""
    validation.validate(value, schema, lambda error: bad(attr, reason(error.validator)))
    return value


def v_string(max_len: int = 255, nullable: bool = False) -> Callable:
    schema = {"type": ["string", "null"] if nullable else "string", "maxLength": max_len}

    def check(value, attr):
        if value is None and nullable:
            return ""
        return _checked(value, attr, schema, lambda keyword: f"'{value}' is not a valid string" if keyword == "type"
                        else f"'{value}' exceeds maximum length of {max_len}")
    return _described(check, schema)


def to_bool(value, attr):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.strip().lower() in ("true", "1", "yes", "on")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise bad(attr, f"'{value}' cannot be converted to boolean")


def v_int(low: int | None = None, high: int | None = None, nullable: bool = False) -> Callable:
    def check(value, attr):
        if value is None and nullable:
            return None
        if isinstance(value, bool):
            raise bad(attr, f"'{value}' is not an integer")
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise bad(attr, f"'{value}' is not an integer")
        if isinstance(value, int) and not rest.INT64_MIN <= value <= rest.INT64_MAX:
            raise bad(attr, f"'{value}' is out of range")
        if not isinstance(value, int):
            raise bad(attr, f"'{value}' is not an integer")
        if low is not None and value < low:
            raise bad(attr, f"'{value}' is too small - must be at least '{low}'")
        if high is not None and value > high:
            raise bad(attr, f"'{value}' is too large - must be no larger than '{high}'")
        return value
    bounds = {k: v for k, v in (("minimum", low), ("maximum", high)) if v is not None}
    return _described(check, {"type": ["integer", "null"] if nullable else "integer", **bounds})


def v_uuid(value, attr):
    if not isinstance(value, str):
        raise bad(attr, f"'{value}' is not a valid UUID")
    if len(value) not in (32, 36):
        raise bad(attr, f"'{value}' is not a valid UUID")
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise bad(attr, f"'{value}' is not a valid UUID")


def v_ip(value, attr, *, nullable: bool = False):
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise bad(attr, f"'{value}' is not a valid IP address")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise bad(attr, f"'{value}' is not a valid IP address")


def v_gateway(value, attr):
    return v_ip(value, attr, nullable=True)


def v_cidr(value, attr):
    if not isinstance(value, str) or "/" not in value:
        raise bad(attr, f"'{value}' is not a valid IP subnet")
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise bad(attr, f"'{value}' is not a valid IP subnet")
    if ipaddress.ip_interface(value).ip != net.network_address:
        raise bad(attr, f"'{value}' isn't a recognized IP subnet cidr, '{net}' is recommended")
    return str(net)


def v_prefix(value, attr):
    """A CIDR where host bits are allowed (normalised away), or None; a bare IP is a host route."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad(attr, f"'{value}' is not a valid IP subnet")
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise bad(attr, f"'{value}' is not a valid IP subnet")


def v_rule_prefix(value, attr):
    """A security group rule's remote prefix: kept as given, host bits and all, with its prefix length
    added when absent (Neutron's ``str(netaddr.IPNetwork(value))``), or None."""
    if value is None:
        return None
    v_prefix(value, attr)
    return str(ipaddress.ip_interface(value))


def v_ip_version(value, attr):
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or value not in (4, 6):
        raise bad(attr, f"{value} is not in [4, 6]")
    return value


def v_list_of(item: Callable, *, unique: bool = False, nullable: bool = False) -> Callable:
    def check(value, attr):
        if value is None and nullable:
            return []
        _checked(value, attr, _LIST, lambda _keyword: f"'{value}' is not a list")
        out = [item(v, attr) for v in value]
        if unique:
            seen = set()
            for v in out:
                key = repr(v)
                if key in seen:
                    raise bad(attr, f"Duplicate items in the list: '{v}'")
                seen.add(key)
        return out
    return check


def _dict_keys(value, attr, required: set[str], optional: set[str] = frozenset()) -> dict:
    _checked(value, attr, _DICT, lambda _keyword: f"'{value}' is not a dictionary")
    keys = set(value)
    if not required <= keys or keys - required - optional:
        expected = ", ".join(sorted(required | optional))
        raise bad(attr, f"Validation of dictionary's keys failed. Expected keys: {{{expected}}} "
                        f"Provided keys: {{{', '.join(sorted(keys))}}}")
    return value


def v_nameserver(value, attr):
    if not isinstance(value, str):
        raise bad(attr, f"'{value}' is not a valid nameserver")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise bad(attr, f"'{value}' is not a valid nameserver")


def v_host_route(value, attr):
    _dict_keys(value, attr, {"destination", "nexthop"})
    return {"destination": v_prefix(value["destination"], attr) if value["destination"] is not None
            else _none(attr, value), "nexthop": v_ip(value["nexthop"], attr)}


def _none(attr, value):
    raise bad(attr, f"'{value}' is not a valid IP subnet")


def v_pool(value, attr):
    _dict_keys(value, attr, {"start", "end"})
    return {"start": v_ip(value["start"], attr), "end": v_ip(value["end"], attr)}


def v_fixed_ip(value, attr):
    _checked(value, attr, _DICT, lambda _keyword: f"'{value}' is not a dictionary")
    extra = set(value) - {"subnet_id", "ip_address"}
    if extra:
        raise bad(attr, f"Unrecognized attribute(s) '{', '.join(sorted(extra))}'")
    if not value:
        raise bad(attr, "Missing subnet_id or ip_address")
    out = {}
    if value.get("subnet_id") is not None:
        out["subnet_id"] = v_uuid(value["subnet_id"], attr)
    if value.get("ip_address") is not None:
        out["ip_address"] = v_ip(value["ip_address"], attr)
    if not out:
        raise bad(attr, "Missing subnet_id or ip_address")
    return out


def v_mac(value, attr):
    if not isinstance(value, str) or not _MAC_RE.match(value):
        raise bad(attr, f"'{value}' is not a valid MAC address")
    mac = value.lower().replace("-", ":")
    if mac == "00:00:00:00:00:00" or int(mac.split(":")[0], 16) & 1:
        raise bad(attr, f"'{value}' is not a valid MAC address")
    return mac


to_bool.json_schema = {"type": "boolean"}
v_uuid.json_schema = {"type": "string", "format": "uuid"}


def v_dict(value, attr):
    if value is None:
        return {}
    return _checked(value, attr, _DICT, lambda _keyword: f"'{value}' is not a dictionary")


def v_in(values, nullable: bool = False) -> Callable:
    schema = {"enum": list(values)}

    def check(value, attr):
        if value is None and nullable:
            return None
        return _checked(value, attr, schema, lambda _keyword: f"{value} is not in {list(values)}")
    return _described(check, {"enum": [*values, None] if nullable else list(values)})


def v_protocol(value, attr):
    if value is None:
        return None
    if isinstance(value, bool):
        raise exceptions.SecurityGroupRuleInvalidProtocol(protocol=value, values=sorted(PROTOCOL_NAMES))
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise exceptions.SecurityGroupRuleInvalidProtocol(protocol=value, values=sorted(PROTOCOL_NAMES))
    low = value.lower()
    if low in ("any", "", "0"):  # Neutron normalises these to "any protocol"
        return None if low in ("any", "") else "0"
    if low in PROTOCOL_NAMES:
        return low
    if low.isdigit() and 0 <= int(low) <= 255:
        return low
    raise exceptions.SecurityGroupRuleInvalidProtocol(protocol=value, values=sorted(PROTOCOL_NAMES))


def v_port_number(value, attr):
    if value is None:
        return None
    return v_int(0, 65535)(value, attr)


def v_project(value, attr):
    return v_string(255)(value, attr)


def _v_uuid_or_none(value, attr):
    return None if value is None else v_uuid(value, attr)


_v_uuid_or_none.json_schema = {"type": ["string", "null"], "format": "uuid"}


def v_gateway_info(value, attr):
    """A router's ``external_gateway_info``: None (or ``{}``: none) or ``{network_id, enable_snat?,
    external_fixed_ips?}``."""
    if value is None or value == {}:
        return None
    _checked(value, attr, _DICT, lambda _keyword: f"'{value}' is not a dictionary")
    _dict_keys(value, attr, {"network_id"}, {"enable_snat", "external_fixed_ips"})
    out = {"network_id": v_uuid(value["network_id"], attr)}
    if "enable_snat" in value:
        out["enable_snat"] = to_bool(value["enable_snat"], attr)
    if "external_fixed_ips" in value:
        out["external_fixed_ips"] = v_list_of(v_fixed_ip)(value["external_fixed_ips"], attr)
    return out


_FIXED_IP_SCHEMA = {"type": "object", "properties": {"subnet_id": {"type": "string"},
                                                     "ip_address": {"type": "string"}}}
v_gateway_info.json_schema = {"type": ["object", "null"], "properties": {
    "network_id": {"type": "string", "format": "uuid"}, "enable_snat": {"type": "boolean"},
    "external_fixed_ips": {"type": "array", "items": _FIXED_IP_SCHEMA}}}


def v_routes(value, attr):
    return v_list_of(v_host_route, unique=True, nullable=True)(value, attr)


v_routes.json_schema = {"type": ["array", "null"], "items": {
    "type": "object", "properties": {"destination": {"type": "string"}, "nexthop": {"type": "string"}}}}


# Resources -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Attr:
    post: bool = True
    put: bool = True
    default: Any = UNSET
    validate: Callable | None = None
    admin_only: bool = False  # only an admin may set it (403 otherwise)


RO = Attr(post=False, put=False)
_PROJECT = Attr(put=False, validate=v_project)

ATTRIBUTES: dict[str, dict[str, Attr]] = {
    "network": {
        "id": RO, "status": RO, "subnets": RO, "created_at": RO, "updated_at": RO,
        "revision_number": RO, "tags": RO, "availability_zones": RO, "availability_zone_hints": RO,
        "ipv4_address_scope": RO, "ipv6_address_scope": RO, "l2_adjacency": RO,
        "name": Attr(default="", validate=v_string(255, nullable=True)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "admin_state_up": Attr(default=True, validate=to_bool),
        "shared": Attr(default=False, validate=to_bool, admin_only=True),
        "router:external": Attr(default=False, validate=to_bool, admin_only=True),
        "is_default": Attr(default=False, validate=to_bool, admin_only=True),
        "mtu": Attr(default=UNSET, validate=v_int(68, 9216)),  # default: the segment's largest
        "port_security_enabled": Attr(default=True, validate=to_bool),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
        # Neutron's provider network extension (nefos.control.network.segments): set by an admin at creation
        "provider:network_type": Attr(put=False, default=UNSET, validate=v_in(("vxlan", "local")), admin_only=True),
        "provider:segmentation_id": Attr(put=False, default=UNSET, validate=v_int(1, 2 ** 24 - 1), admin_only=True),
        "provider:physical_network": Attr(put=False, default=UNSET, validate=v_in((), nullable=True),
                                          admin_only=True),
    },
    "subnet": {
        "id": RO, "created_at": RO, "updated_at": RO, "revision_number": RO, "tags": RO,
        "subnetpool_id": Attr(put=False, default=None, validate=lambda v, a: _no_pools(v, a)),
        "service_types": RO,
        "network_id": Attr(put=False, default=REQUIRED, validate=v_uuid),
        "ip_version": Attr(put=False, default=REQUIRED, validate=v_ip_version),
        "cidr": Attr(put=False, default=REQUIRED, validate=v_cidr),
        "name": Attr(default="", validate=v_string(255, nullable=True)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "gateway_ip": Attr(default=UNSET, validate=v_gateway),
        "allocation_pools": Attr(default=UNSET, validate=v_list_of(v_pool)),
        "enable_dhcp": Attr(default=True, validate=to_bool),
        "dns_nameservers": Attr(default=[], validate=v_list_of(v_nameserver, unique=True, nullable=True)),
        "host_routes": Attr(default=[], validate=v_list_of(v_host_route, unique=True, nullable=True)),
        "ipv6_ra_mode": Attr(put=False, default=None, validate=v_in(IPV6_MODES, nullable=True)),
        "ipv6_address_mode": Attr(put=False, default=None, validate=v_in(IPV6_MODES, nullable=True)),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
    "port": {
        "id": RO, "status": RO, "created_at": RO, "updated_at": RO, "revision_number": RO,
        "tags": RO, "binding:vif_type": RO, "binding:vif_details": RO,
        "network_id": Attr(put=False, default=REQUIRED, validate=v_uuid),
        "name": Attr(default="", validate=v_string(255, nullable=True)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "admin_state_up": Attr(default=True, validate=to_bool),
        "mac_address": Attr(default=UNSET, validate=v_mac),
        "fixed_ips": Attr(default=UNSET, validate=v_list_of(v_fixed_ip, unique=True)),
        "device_id": Attr(default="", validate=v_string(255, nullable=True)),
        "device_owner": Attr(default="", validate=v_string(255, nullable=True)),
        "security_groups": Attr(default=UNSET, validate=v_list_of(v_uuid, nullable=True)),
        "port_security_enabled": Attr(default=UNSET, validate=to_bool),
        "binding:host_id": Attr(default="", validate=v_string(255, nullable=True), admin_only=True),
        "binding:vnic_type": Attr(default="normal", validate=v_in(VNIC_TYPES)),
        "binding:profile": Attr(default={}, validate=v_dict, admin_only=True),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
    "security_group": {
        "id": RO, "created_at": RO, "updated_at": RO, "revision_number": RO, "tags": RO,
        "security_group_rules": RO, "shared": RO,
        "name": Attr(default="", validate=v_string(255, nullable=True)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "stateful": Attr(default=True, validate=to_bool),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
    "security_group_rule": {
        "id": RO, "created_at": RO, "updated_at": RO, "revision_number": RO, "tags": RO,
        "security_group_id": Attr(put=False, default=REQUIRED, validate=v_uuid),
        "direction": Attr(put=False, default=REQUIRED, validate=v_in(("ingress", "egress"))),
        "ethertype": Attr(put=False, default="IPv4", validate=v_in(("IPv4", "IPv6"))),
        "protocol": Attr(put=False, default=None, validate=v_protocol),
        "port_range_min": Attr(put=False, default=None, validate=v_port_number),
        "port_range_max": Attr(put=False, default=None, validate=v_port_number),
        "remote_ip_prefix": Attr(put=False, default=None, validate=v_rule_prefix),
        "remote_group_id": Attr(put=False, default=None,
                                validate=lambda v, a: None if v is None else v_uuid(v, a)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
    "router": {
        "id": RO, "status": RO, "created_at": RO, "updated_at": RO, "revision_number": RO, "tags": RO,
        "availability_zones": RO, "availability_zone_hints": RO,
        "name": Attr(default="", validate=v_string(255, nullable=True)),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "admin_state_up": Attr(default=True, validate=to_bool),
        "external_gateway_info": Attr(default=None, validate=v_gateway_info),
        "routes": Attr(post=False, validate=v_routes),  # extraroute: set by update only
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
    "floatingip": {
        "id": RO, "status": RO, "router_id": RO, "created_at": RO, "updated_at": RO,
        "revision_number": RO, "tags": RO,
        "floating_network_id": Attr(put=False, default=REQUIRED, validate=v_uuid),
        "floating_ip_address": Attr(put=False, default=UNSET, admin_only=True,
                                    validate=_described(lambda v, a: v_ip(v, a), {"type": "string"})),
        "subnet_id": Attr(put=False, default=UNSET, validate=_v_uuid_or_none),
        "port_id": Attr(default=None, validate=_v_uuid_or_none),
        "fixed_ip_address": Attr(default=None, validate=_described(
            lambda v, a: v_ip(v, a, nullable=True), {"type": ["string", "null"]})),
        "description": Attr(default="", validate=v_string(255, nullable=True)),
        "project_id": _PROJECT, "tenant_id": _PROJECT,
    },
}


def _no_pools(value, attr):
    if value is not None:
        raise bad(attr, "subnet pools are not supported")
    return None


def request_schema(resource: str, *, create: bool) -> dict:
    """The JSON Schema of a ``{resource: {...}}`` create or update body, from the attributes
    ``validate_body`` checks it against: the attributes it accepts, those it requires, and each
    value's type where its validator declares one."""
    spec = ATTRIBUTES[resource]
    accepted = {name: dict(getattr(attr.validate, "json_schema", {}))
                for name, attr in spec.items() if (attr.post if create else attr.put)}
    item = {"type": "object", "properties": accepted, "additionalProperties": False}
    required = sorted(n for n, a in spec.items() if create and a.post and a.default is REQUIRED)
    if required:
        item["required"] = required
    return {"type": "object", "required": [resource], "properties": {resource: item},
            "additionalProperties": False}


def validate_body(resource: str, body: Any, *, create: bool, is_admin: bool) -> dict:
    """Check one resource's attributes; on create, fill in defaults (UNSET ones left out)."""
    spec = ATTRIBUTES[resource]
    if not isinstance(body, dict):
        raise bad_request(f"Invalid format for {resource}: the body must be an object, not {type(body).__name__}.")
    unknown = sorted(k for k in body if k not in spec)
    if unknown:
        raise bad_request(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    out: dict = {}
    for name, value in body.items():
        attr = spec[name]
        if create and not attr.post:
            raise bad_request(f"Attribute '{name}' not allowed in POST")
        if not create and not attr.put:
            raise bad_request(f"Cannot update read-only attribute {name}")
        if attr.admin_only and not is_admin:
            raise exceptions.PolicyNotAuthorized(
                f"(rule:{'create' if create else 'update'}_{resource}:{name}) is disallowed by policy")
        out[name] = attr.validate(value, name) if attr.validate else value
    if "tenant_id" in out or "project_id" in out:
        tenant, project = out.pop("tenant_id", None), out.pop("project_id", None)
        if tenant is not None and project is not None and tenant != project:
            raise bad_request("'project_id' and 'tenant_id' do not match")
        out["project_id"] = project if project is not None else tenant
    if create:
        for name, attr in spec.items():
            if name in out or name in ("tenant_id", "project_id") or not attr.post:
                continue
            if attr.default is REQUIRED:
                raise bad_request(f"Failed to parse request. Required attribute '{name}' not specified")
            if attr.default is not UNSET:
                default = attr.default
                out[name] = list(default) if isinstance(default, list) else (
                    dict(default) if isinstance(default, dict) else default)
    return out


# Listing: filters, sorting, pagination ------------------------------------------------

BOOL_FIELDS = {"admin_state_up", "shared", "router:external", "is_default", "port_security_enabled", "enable_dhcp",
               "stateful", "l2_adjacency"}
INT_FIELDS = {"mtu", "ip_version", "revision_number", "port_range_min", "port_range_max"}
LIST_FIELDS = {"subnets", "security_groups", "availability_zones", "availability_zone_hints",
               "dns_nameservers", "service_types"}
UNFILTERABLE = {"allocation_pools", "host_routes", "binding:profile", "binding:vif_details",
                "external_gateway_info", "routes",
                "security_group_rules", "created_at", "updated_at", "nefos:provisioning"}
TAG_FILTERS = {"tags", "tags-any", "not-tags", "not-tags-any"}


def filterable(resource_fields: set[str]) -> set[str]:
    """The attributes a list filters by with ``attribute=value`` (the tag filters aside)."""
    return set(resource_fields) - UNFILTERABLE - TAG_FILTERS


def sortable(resource_fields: set[str]) -> set[str]:
    """The attributes a list sorts by: the scalar ones."""
    return set(resource_fields) - UNFILTERABLE - LIST_FIELDS - {"fixed_ips", "tags"}


def filter_value(field: str, raw):
    """A filter's value as the view shows the field (a boolean, an integer or None, or as given)."""
    if field in BOOL_FIELDS:
        return to_bool(raw, field)
    if field in INT_FIELDS:
        if raw in (None, "", "None"):
            return None
        return v_int()(raw, field)
    return raw


def norm(v):
    """A filter matches None, "" and "None" alike."""
    if v is None or v == "None":
        return ""
    return v


def tag_pred(kind: str, wanted: set[str]) -> Callable[[dict], bool]:
    def pred(d):
        tags = set(d.get("tags") or [])
        if kind == "tags":
            return wanted <= tags
        if kind == "tags-any":
            return bool(wanted & tags)
        if kind == "not-tags":
            return not wanted <= tags or not wanted
        return not wanted & tags
    return pred


def parse_fixed_ips_filter(values: list) -> list[tuple[str, str]]:
    """A ``fixed_ips`` filter's (key, value) pairs, every one of which an address of the port must
    match: ``ip_address`` (normalized), ``subnet_id`` or ``ip_address_substr``."""
    conds = []
    for v in values:
        if isinstance(v, dict):
            items = list(v.items())
        else:
            key, _, val = str(v).partition("=")
            items = [(key.strip(), val.strip())]
        for key, val in items:
            if key not in ("ip_address", "subnet_id", "ip_address_substr"):
                raise bad_request(f"Invalid input for fixed_ips. Reason: unsupported filter '{key}'.")
            if key == "ip_address":
                try:
                    val = str(ipaddress.ip_address(val))
                except ValueError:
                    raise bad(f"fixed_ips", f"'{val}' is not a valid IP address")
            conds.append((key, val))
    return conds


def parse_sorts(resource_fields: set[str], sort_key, sort_dir) -> list[tuple[str, bool]]:
    keys = sort_key if isinstance(sort_key, list) else ([sort_key] if sort_key else [])
    dirs = sort_dir if isinstance(sort_dir, list) else ([sort_dir] if sort_dir else [])
    if dirs and len(dirs) != len(keys):
        raise bad_request("The number of sort_keys and sort_dirs must be same")
    out = []
    for i, key in enumerate(keys):
        if key == "tenant_id":
            key = "project_id"
        if key not in sortable(resource_fields):
            raise bad_request(f"{key} is invalid attribute for sort_key")
        direction = dirs[i] if dirs else "asc"
        if direction not in ("asc", "desc"):
            raise bad_request(f"{direction} is invalid value for sort_dir, valid value is 'asc' and 'desc'")
        out.append((key, direction == "asc"))
    if not any(k == "id" for k, _ in out):
        out.append(("id", out[-1][1] if out else True))
    return out


def select_fields(doc: dict, fields: list[str] | None) -> dict:
    if not fields:
        return doc
    wanted = ["project_id" if f == "tenant_id" and "tenant_id" not in doc else f for f in fields]
    return {f: doc[f] for f in wanted if f in doc}
