"""Security groups through the Compute API (Nova's ``nova.network.security_group_api``, the proxy
behind os-security-groups and os-security-group-rules up to 2.35).

Every call goes to the network service with the caller's own context, so what the caller may see
and change is what the Networking API lets that caller see and change. Groups come back in Nova's
format: ``project_id`` for Neutron's ``tenant_id`` and only the ingress rules, each as
``protocol``/``from_port``/``to_port``/``cidr``/``group_id``. The Networking API's refusals are
turned into Nova's (a 409 on delete is a 400, an over-quota or conflicting create a 403).
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from nefos import exceptions


class InvalidCidr(exceptions.Invalid):
    message = "%(cidr)s is not a valid IP network."


class InvalidPortRange(exceptions.Invalid):
    message = "Invalid port range %(from_port)s:%(to_port)s. %(msg)s"


class InvalidIpProtocol(exceptions.Invalid):
    message = "Invalid IP protocol %(protocol)s."


class SecurityGroupLimitExceeded(exceptions.OverQuota):
    message = "Quota exceeded, too many security groups."


def parse_cidr(cidr) -> str:
    """A rule's CIDR, ``0.0.0.0/0`` when none (Nova's: URL-quoted text, a prefix length required)."""
    if not cidr:
        return "0.0.0.0/0"
    try:
        cidr = urllib.parse.unquote(cidr)
        if "/" not in cidr or not cidr.split("/", 1)[1]:
            raise ValueError(cidr)
        ipaddress.ip_network(cidr, strict=False)
    except (TypeError, ValueError, AttributeError):
        raise InvalidCidr(cidr=cidr) from None
    return cidr


def nova_rule(rule: dict) -> dict:
    """A Networking API rule in Nova's terms (a protocol without ports is all its ports)."""
    protocol = rule["protocol"]
    low, high = rule.get("port_range_min"), rule.get("port_range_max")
    if protocol and low is None and high is None:
        low, high = (1, 65535) if protocol.upper() in ("TCP", "UDP") else (-1, -1)
    return {"id": rule["id"], "parent_group_id": rule["security_group_id"], "protocol": protocol,
            "from_port": low, "to_port": high, "group_id": rule["remote_group_id"],
            "cidr": parse_cidr(rule.get("remote_ip_prefix"))}


def nova_group(group: dict) -> dict:
    return {"id": group["id"], "description": group["description"], "name": group["name"],
            "project_id": group["tenant_id"],
            "rules": [nova_rule(r) for r in group.get("security_group_rules") or [] if r["direction"] == "ingress"]}


async def get(network_api, ctx, group_id: str) -> dict:
    """The group as the caller sees it (SecurityGroupNotFound otherwise)."""
    return nova_group(await network_api.get_security_group(ctx, group_id))


async def list_groups(network_api, ctx, project_id: str, all_tenants: bool) -> list[dict]:
    """The project's groups; an admin asking for ``all_tenants`` gets every group (Nova's ``list``)."""
    filters = None if all_tenants and ctx.is_admin else {"tenant_id": [project_id]}
    return [nova_group(g) for g in await network_api.list_security_groups(ctx, filters)]


async def create(network_api, ctx, name: str, description: str) -> dict:
    try:
        group = await network_api.create_security_group(ctx, {
            "name": name, "description": description})
    except (exceptions.OverQuota, exceptions.Conflict) as exc:
        raise SecurityGroupLimitExceeded(str(exc)) from None  # Nova: Neutron's 409 is a 403
    return nova_group(group)


async def update(network_api, ctx, group: dict, name: str, description: str) -> dict:
    try:
        updated = await network_api.update_security_group(ctx, group["id"],
                                                     {"name": name, "description": description})
    except exceptions.Conflict as exc:  # renaming the default group, or to "default"
        raise exceptions.Invalid(str(exc)) from None
    return nova_group(updated)


async def destroy(network_api, ctx, group: dict) -> None:
    try:
        await network_api.delete_security_group(ctx, group["id"])
    except exceptions.Conflict as exc:  # in use, or the default group: Nova answers 400
        raise exceptions.Invalid(str(exc)) from None


def new_ingress_rule(ip_protocol, from_port, to_port, *, group_id: str | None = None,
                     cidr: str | None = None) -> dict | None:
    """Nova's ``_new_ingress_rule``: the rule a request asks for, None when a CIDR rule lacks its
    protocol or ports. A group rule without ports opens all of them."""
    values: dict = {}
    if group_id:
        values["group_id"] = group_id
        upper = ip_protocol.upper() if isinstance(ip_protocol, str) else ""
        if from_port is None and to_port is None:
            if upper == "ICMP":
                from_port = to_port = -1
            elif upper in ("TCP", "UDP"):
                from_port, to_port = 1, 65535
    elif cidr:
        values["cidr"] = cidr
    if ip_protocol and from_port is not None and to_port is not None:
        protocol = str(ip_protocol)
        try:
            from_port, to_port = int(from_port), int(to_port)
        except (TypeError, ValueError):
            reason = ("Type and Code must be integers for ICMP protocol type" if protocol.upper() == "ICMP"
                      else "To and From ports must be integers")
            raise exceptions.Invalid(f"Invalid input received: {reason}") from None
        upper = protocol.upper()
        if upper not in ("TCP", "UDP", "ICMP"):
            raise InvalidIpProtocol(protocol=protocol)
        if upper in ("TCP", "UDP") and from_port > to_port:
            raise InvalidPortRange(from_port=from_port, to_port=to_port,
                                   msg="Former value cannot be greater than the later")
        if upper in ("TCP", "UDP") and (from_port < 1 or to_port > 65535):
            raise InvalidPortRange(from_port=from_port, to_port=to_port,
                                   msg=f"Valid {upper} ports should be between 1-65535")
        if upper == "ICMP" and not (-1 <= from_port <= 255 and -1 <= to_port <= 255):
            raise InvalidPortRange(from_port=from_port, to_port=to_port,
                                   msg="For ICMP, the type:code must be valid")
        values.update(protocol=protocol.lower(), from_port=from_port, to_port=to_port)
    elif cidr:
        return None
    return values


def rule_exists(group: dict, new_rule: dict) -> bool:
    keys = ("group_id", "cidr", "from_port", "to_port", "protocol")
    return any(all(rule.get(k) == new_rule.get(k) for k in keys) for rule in group["rules"])


def _neutron_rule(rule: dict) -> dict:
    """Nova only makes ingress rules; a group rule is IPv4 only (as Nova)."""
    cidr = rule.get("cidr")
    body = {"direction": "ingress", "protocol": rule.get("protocol"),
            "ethertype": "IPv6" if cidr and ipaddress.ip_network(cidr, strict=False).version == 6 else "IPv4",
            "remote_ip_prefix": cidr, "security_group_id": rule["parent_group_id"],
            "remote_group_id": rule.get("group_id")}
    if rule.get("from_port", -1) != -1:
        body["port_range_min"] = rule["from_port"]
    if rule.get("to_port", -1) != -1:
        body["port_range_max"] = rule["to_port"]
    return body


async def create_rule(network_api, ctx, group: dict, new_rule: dict) -> dict:
    if rule_exists(group, new_rule):
        raise exceptions.Invalid(f"This rule already exists in group {new_rule['parent_group_id']}")
    try:
        rule = await network_api.create_security_group_rule(ctx, _neutron_rule(new_rule))
    except (exceptions.OverQuota, exceptions.Conflict) as exc:
        raise SecurityGroupLimitExceeded(str(exc)) from None  # Nova: Neutron's 409 is a 403
    return nova_rule(rule)


async def get_rule(network_api, ctx, rule_id: str) -> dict:
    try:
        return nova_rule(await network_api.get_security_group_rule(ctx, rule_id))
    except exceptions.SecurityGroupRuleNotFound as exc:
        raise exceptions.SecurityGroupNotFound(str(exc)) from None


async def remove_rule(network_api, ctx, rule_id: str) -> None:
    try:
        await network_api.delete_security_group_rule(ctx, rule_id)
    except exceptions.SecurityGroupRuleNotFound as exc:
        raise exceptions.SecurityGroupNotFound(str(exc)) from None


async def instance_groups(network_api, ctx, instance_uuid: str) -> list[dict]:
    """The groups on the server's ports, once per port holding each, that the caller may see (Nova's
    ``get_instance_security_groups`` detailed)."""
    ports = await network_api.list_ports(ctx, {"device_id": [instance_uuid]}, ["security_groups", "device_id"])
    ids = list(dict.fromkeys(g for p in ports for g in p.get("security_groups") or []))
    if not ids:
        return []
    found = {g["id"]: g for g in await network_api.list_security_groups(ctx, {"id": ids})}
    return [nova_group(found[g]) for p in ports for g in p.get("security_groups") or [] if g in found]
