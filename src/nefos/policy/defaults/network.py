"""The Networking API's default rules, under Neutron's names."""

from nefos.policy.defaults.base import ADMIN, ADMIN_OR_MEMBER, ADMIN_OR_READER

NETWORK_RULES: dict[str, str] = {}
for _one in ("network", "subnet", "port", "security_group", "security_group_rule", "router", "floatingip"):
    NETWORK_RULES[f"create_{_one}"] = ADMIN_OR_MEMBER
    NETWORK_RULES[f"get_{_one}"] = ADMIN_OR_READER
    NETWORK_RULES[f"update_{_one}"] = ADMIN_OR_MEMBER
    NETWORK_RULES[f"delete_{_one}"] = ADMIN_OR_MEMBER
NETWORK_RULES.update({
    "get_quota": ADMIN_OR_READER,
    "update_quota": ADMIN,
    "delete_quota": ADMIN,
    "add_router_interface": ADMIN_OR_MEMBER,
    "remove_router_interface": ADMIN_OR_MEMBER,
    "get_auto_allocated_topology": ADMIN_OR_READER,
    "delete_auto_allocated_topology": ADMIN_OR_MEMBER,
})
