"""The Networking API's resources as its handlers answer them, in JSON Schema (Neutron's API
reference: attribute names, types and which may be null), and the query parameters of its lists.

The attributes declared here are the resources' fields: what ``fields=`` selects, what a list
filters and sorts by (``list_query`` and ``attributes.parse_sorts`` get these sets), so the
documented query parameters are the ones the handlers accept.
"""

from __future__ import annotations

from nefos.control.network import attributes as attrs
from nefos.control.network import provisioning
from nefos.control.network.common import QUOTA_RESOURCES

_UUID = {"type": "string", "format": "uuid"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_TIME = {"type": "string", "format": "date-time"}
# Neutron always has a project; a no-auth caller without one creates resources with none.
_PROJECT = {"type": ["string", "null"]}

_STANDARD = {
    "id": _UUID, "project_id": _PROJECT, "tenant_id": _PROJECT, "tags": _STRINGS,
    "created_at": _TIME, "updated_at": _TIME, "revision_number": {"type": "integer", "minimum": 0},
}

_RULE = {
    **_STANDARD,
    "security_group_id": _UUID,
    "direction": {"enum": ["ingress", "egress"]},
    "ethertype": {"enum": ["IPv4", "IPv6"]},
    "protocol": _NULLABLE_STRING,
    "port_range_min": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
    "port_range_max": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
    "remote_ip_prefix": _NULLABLE_STRING,
    "remote_group_id": {"type": ["string", "null"], "format": "uuid"},
    "description": {"type": "string"},
}

ATTRIBUTES: dict[str, dict[str, dict]] = {
    "network": {
        **_STANDARD,
        "name": {"type": "string"}, "description": {"type": "string"},
        "admin_state_up": {"type": "boolean"},
        "status": {"enum": ["ACTIVE", "DOWN", "BUILD", "ERROR"]},
        "subnets": {"type": "array", "items": _UUID},
        "shared": {"type": "boolean"}, "router:external": {"type": "boolean"},
        "is_default": {"type": "boolean"},  # external networks only (auto-allocated-topology)
        "mtu": {"type": "integer"}, "port_security_enabled": {"type": "boolean"},
        "availability_zone_hints": _STRINGS, "availability_zones": _STRINGS,
        "ipv4_address_scope": _NULLABLE_STRING, "ipv6_address_scope": _NULLABLE_STRING,
        "l2_adjacency": {"type": "boolean"},
        "provider:network_type": {"enum": ["vxlan", "local"]},
        "provider:segmentation_id": {"type": ["integer", "null"]},
        "provider:physical_network": {"type": "null"},
    },
    "subnet": {
        **_STANDARD,
        "name": {"type": "string"}, "description": {"type": "string"},
        "network_id": _UUID, "ip_version": {"enum": [4, 6]}, "cidr": {"type": "string"},
        "gateway_ip": _NULLABLE_STRING, "enable_dhcp": {"type": "boolean"},
        "allocation_pools": {"type": "array", "items": {
            "type": "object", "required": ["start", "end"],
            "properties": {"start": {"type": "string"}, "end": {"type": "string"}}}},
        "dns_nameservers": _STRINGS,
        "host_routes": {"type": "array", "items": {
            "type": "object", "required": ["destination", "nexthop"],
            "properties": {"destination": {"type": "string"}, "nexthop": {"type": "string"}}}},
        "ipv6_ra_mode": {"enum": [*attrs.IPV6_MODES, None]},
        "ipv6_address_mode": {"enum": [*attrs.IPV6_MODES, None]},
        "subnetpool_id": {"type": ["string", "null"], "format": "uuid"},
        "service_types": _STRINGS,
    },
    "port": {
        **_STANDARD,
        "name": {"type": "string"}, "description": {"type": "string"},
        "network_id": _UUID, "mac_address": {"type": "string"},
        "admin_state_up": {"type": "boolean"}, "status": {"enum": list(attrs.PORT_STATUSES)},
        "device_id": {"type": "string"}, "device_owner": {"type": "string"},
        "fixed_ips": {"type": "array", "items": {
            "type": "object", "required": ["subnet_id", "ip_address"],
            "properties": {"subnet_id": _UUID, "ip_address": {"type": "string"}}}},
        "security_groups": {"type": "array", "items": _UUID},
        "port_security_enabled": {"type": "boolean"},
        "binding:host_id": {"type": "string"}, "binding:vif_type": {"type": "string"},
        "binding:vif_details": {"type": "object"},
        "binding:vnic_type": {"enum": list(attrs.VNIC_TYPES)},
        "binding:profile": {"type": "object"},
        "ip_allocation": {"enum": ["immediate", "deferred", "none"]},
        # Nefos's own: the components the port waits for before it goes ACTIVE (admins only).
        provisioning.ATTRIBUTE: {"type": "object",
                                 "additionalProperties": {"enum": ["satisfied", "pending"]}},
    },
    "security_group": {
        **_STANDARD,
        "name": {"type": "string"}, "description": {"type": "string"},
        "stateful": {"type": "boolean"}, "shared": {"type": "boolean"},
        "security_group_rules": {"type": "array", "items": {
            "type": "object", "properties": _RULE, "required": sorted(_RULE), "additionalProperties": False}},
    },
    "security_group_rule": _RULE,
    "router": {
        **_STANDARD,
        "name": {"type": "string"}, "description": {"type": "string"},
        "admin_state_up": {"type": "boolean"},
        "status": {"enum": ["ACTIVE", "DOWN", "BUILD", "ERROR", "ALLOCATING"]},
        "external_gateway_info": {"type": ["object", "null"], "required": ["network_id"], "properties": {
            "network_id": _UUID, "enable_snat": {"type": "boolean"},
            "external_fixed_ips": {"type": "array", "items": {
                "type": "object", "required": ["subnet_id", "ip_address"],
                "properties": {"subnet_id": _UUID, "ip_address": {"type": "string"}}}}}},
        "routes": {"type": "array", "items": {
            "type": "object", "required": ["destination", "nexthop"],
            "properties": {"destination": {"type": "string"}, "nexthop": {"type": "string"}}}},
        "availability_zone_hints": _STRINGS, "availability_zones": _STRINGS,
    },
    "floatingip": {
        **_STANDARD,
        "description": {"type": "string"},
        "floating_ip_address": {"type": "string"}, "floating_network_id": _UUID,
        "router_id": {"type": ["string", "null"], "format": "uuid"},
        "port_id": {"type": ["string", "null"], "format": "uuid"},
        "fixed_ip_address": _NULLABLE_STRING,
        "status": {"enum": ["ACTIVE", "DOWN", "ERROR"]},
    },
}

_INTERFACE_INFO = {"type": "object", "additionalProperties": False,
                   "required": ["id", "tenant_id", "project_id", "port_id", "network_id", "subnet_id", "subnet_ids"],
                   "properties": {"id": _UUID, "tenant_id": _PROJECT, "project_id": _PROJECT, "port_id": _UUID,
                                  "network_id": _UUID, "subnet_id": _UUID,
                                  "subnet_ids": {"type": "array", "items": _UUID}}}
ROUTER_INTERFACE = _INTERFACE_INFO  # the answer of add_router_interface / remove_router_interface
ROUTER_INTERFACE_REQUEST = {"type": "object", "additionalProperties": False, "minProperties": 1, "properties": {
    "subnet_id": _UUID, "port_id": _UUID}}

# Shown to admins only (a port's binding, as in Neutron's policy, and its provisioning blocks).
ADMIN_ONLY = {"port": ("binding:host_id", "binding:profile", "binding:vif_type", "binding:vif_details",
                       provisioning.ATTRIBUTE),
              "network": ("provider:network_type", "provider:segmentation_id", "provider:physical_network")}
# Shown on some resources only: a network's is_default on external networks, as Neutron extends them.
SOMETIMES = {"network": ("is_default",)}


def fields(resource: str) -> frozenset[str]:
    """The resource's attributes: what ``fields`` selects and lists filter and sort by."""
    return frozenset(ATTRIBUTES[resource])


def resource(member: str, *, complete: bool) -> dict:
    """One resource; ``complete``: every attribute a non-admin sees is there (no ``fields``
    selection applies: the answers of create and update)."""
    item = {"type": "object", "properties": ATTRIBUTES[member], "additionalProperties": False}
    if complete:
        item["required"] = sorted(set(ATTRIBUTES[member]) - set(ADMIN_ONLY.get(member, ()))
                                  - set(SOMETIMES.get(member, ())))
    return item


def one(member: str, *, complete: bool) -> dict:
    return {"type": "object", "required": [member], "additionalProperties": False,
            "properties": {member: resource(member, complete=complete)}}


def many(member: str, key: str, *, complete: bool) -> dict:
    """``{key: [...]}`` (and ``{key}_links`` when a page was asked for)."""
    return {"type": "object", "required": [key], "additionalProperties": False, "properties": {
        key: {"type": "array", "items": resource(member, complete=complete)},
        f"{key}_links": {"type": "array", "items": _LINK}}}


_LINK = {"type": "object", "required": ["rel", "href"],
         "properties": {"rel": {"type": "string"}, "href": {"type": "string"}}}


def _filter_value(field: str) -> dict:
    if field in attrs.BOOL_FIELDS:
        return {"type": "boolean"}
    if field in attrs.INT_FIELDS:
        return {"type": "integer"}
    if field == "fixed_ips":
        return {"type": "string", "pattern": "^(ip_address|subnet_id|ip_address_substr)="}
    return {"type": "string"}


def fields_query(member: str) -> dict:
    """The ``fields`` parameter, repeatable, each value one attribute (or several, comma-separated)."""
    return {"type": "object", "properties": {
        "fields": {"type": "array", "items": {"enum": sorted(fields(member))}}}}


def list_query(member: str) -> dict:
    """The query parameters of the resource's list: a filter per filterable attribute (each
    repeatable, matching any of its values), the tag filters, ``fields``, sorting and paging."""
    resource_fields = fields(member)
    properties = {name: {"type": "array", "items": _filter_value(name)}
                  for name in sorted(attrs.filterable(resource_fields))}
    if "tags" in resource_fields:
        properties.update({name: {"type": "string"} for name in sorted(attrs.TAG_FILTERS)})
    properties.update(fields_query(member)["properties"])
    properties.update({
        "sort_key": {"type": "array", "items": {"enum": sorted(attrs.sortable(resource_fields))}},
        "sort_dir": {"type": "array", "items": {"enum": ["asc", "desc"]}},
        "limit": {"type": "integer", "minimum": 0},
        "marker": _UUID,
        "page_reverse": {"type": "boolean"},
    })
    return {"type": "object", "properties": properties}


# Quotas, extensions, versions ---------------------------------------------------------------

def _limits() -> dict:
    names = sorted(QUOTA_RESOURCES)
    return {"type": "object", "required": names, "additionalProperties": False,
            "properties": {name: {"type": "integer", "minimum": -1} for name in names}}


def quota() -> dict:
    return {"type": "object", "required": ["quota"], "additionalProperties": False,
            "properties": {"quota": _limits()}}


def quota_update_request() -> dict:
    limits = _limits()
    del limits["required"]
    return {"type": "object", "required": ["quota"], "additionalProperties": False,
            "properties": {"quota": {**limits, "minProperties": 1}}}


def quota_or_tenant() -> dict:
    """``GET /v2.0/quotas/{project_id}``: the project's limits, or for ``tenant`` the caller's project."""
    tenant = {"type": "object", "required": ["tenant"], "additionalProperties": False, "properties": {
        "tenant": {"type": "object", "required": ["tenant_id"], "properties": {"tenant_id": _PROJECT}}}}
    return {"anyOf": [quota(), tenant]}


def quotas() -> dict:
    limits = _limits()
    entry = {**limits, "required": [*limits["required"], "project_id", "tenant_id"],
             "properties": {**limits["properties"], "project_id": {"type": "string"},
                            "tenant_id": {"type": "string"}}}
    return {"type": "object", "required": ["quotas"], "additionalProperties": False,
            "properties": {"quotas": {"type": "array", "items": entry}}}


def quota_details() -> dict:
    usage = {"type": "object", "required": ["limit", "used", "reserved"], "additionalProperties": False,
             "properties": {"limit": {"type": "integer", "minimum": -1}, "used": {"type": "integer"},
                            "reserved": {"type": "integer"}}}
    names = sorted(QUOTA_RESOURCES)
    return {"type": "object", "required": ["quota"], "additionalProperties": False, "properties": {
        "quota": {"type": "object", "required": names, "additionalProperties": False,
                  "properties": {name: usage for name in names}}}}


_EXTENSION = {"type": "object", "required": ["alias", "name", "description", "updated", "links"],
              "additionalProperties": False, "properties": {
                  "alias": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"},
                  "updated": {"type": "string"}, "links": {"type": "array", "items": _LINK}}}
EXTENSION = {"type": "object", "required": ["extension"], "properties": {"extension": _EXTENSION}}
EXTENSIONS = {"type": "object", "required": ["extensions"],
              "properties": {"extensions": {"type": "array", "items": _EXTENSION}}}

AUTO_ALLOCATED_TOPOLOGY = {"type": "object", "required": ["auto_allocated_topology"], "additionalProperties": False,
                           "properties": {"auto_allocated_topology": {
                               "type": "object", "required": ["id", "tenant_id", "project_id"],
                               "additionalProperties": False, "properties": {
                                   # the network's id, or "dry-run=pass" for ?fields=dry-run
                                   "id": {"type": "string"}, "tenant_id": _PROJECT, "project_id": _PROJECT}}}}
AUTO_ALLOCATED_TOPOLOGY_QUERY = {"type": "object", "properties": {
    "fields": {"type": "array", "items": {"enum": ["dry-run"]}}}}

VERSIONS = {"type": "object", "required": ["versions"], "properties": {"versions": {"type": "array", "items": {
    "type": "object", "required": ["id", "status", "links"], "properties": {
        "id": {"type": "string"}, "status": {"enum": ["CURRENT", "SUPPORTED", "DEPRECATED"]},
        "links": {"type": "array", "items": _LINK}}}}}}
RESOURCES = {"type": "object", "required": ["resources"], "properties": {"resources": {"type": "array", "items": {
    "type": "object", "required": ["name", "collection", "links"], "properties": {
        "name": {"type": "string"}, "collection": {"type": "string"},
        "links": {"type": "array", "items": _LINK}}}}}}
