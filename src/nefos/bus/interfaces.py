"""Every RPC interface served on the bus, with its version history (``nefos.bus.versioning``).

Version 1.0 of each interface is exactly what Nefos 0.9.0 sent, whose messages carried no version
(a message without one is read as 1.0). To change an interface (docs/architecture.md, "Versioned
messages and rolling upgrades"):

* a new method: one line ``"new_method": "1.N",`` below, and ``version="1.N"``;
* a new argument of a method: ``args={"method": {"new_arg": "1.N"}}`` and ``version="1.N"``; a
  client pinned below 1.N leaves the argument out, so the server's method must give it a default
  that means what the older form meant (or the client method adapts by ``can_send_version``);
* removing a method or an argument, or changing what one means: a new major version (2.0) — the
  servers serve only one major version, so every client must be upgraded first.

History (newest last, one line per version):

compute     1.0  the surface of Nefos 0.9.0
conductor   1.0  the surface of Nefos 0.9.0
scheduler   1.0  the surface of Nefos 0.9.0
network     1.0  the Networking API operations of Nefos 0.9.0
q-plugin    1.0  the L2/DHCP agents' reports of Nefos 0.9.0
q-l3-plugin 1.0  the L3 agent's sync of Nefos 0.9.0
dhcp_agent  1.0  the network service's fanout to DHCP agents of Nefos 0.9.0
l3_agent    1.0  the network service's fanout to L3 agents of Nefos 0.9.0
"""

from __future__ import annotations

from nefos.bus.versioning import RPCInterface

COMPUTE = RPCInterface("compute", version="1.0", binary="nova-compute", methods={
    "attach_interface": "1.0",
    "backup_instance": "1.0",
    "build_and_run_instance": "1.0",
    "check_can_live_migrate_destination": "1.0",
    "check_can_migrate": "1.0",
    "cleanup_deleted_migration": "1.0",
    "confirm_resize": "1.0",
    "detach_interface": "1.0",
    "external_instance_event": "1.0",
    "finish_resize": "1.0",
    "finish_revert_resize": "1.0",
    "get_console_output": "1.0",
    "get_diagnostics": "1.0",
    "get_spice_console": "1.0",
    "get_vnc_console": "1.0",
    "live_migration": "1.0",
    "live_migration_abort": "1.0",
    "live_migration_force_complete": "1.0",
    "pause_instance": "1.0",
    "post_live_migration_at_destination": "1.0",
    "pre_live_migration": "1.0",
    "prep_resize": "1.0",
    "reboot_instance": "1.0",
    "rebuild_instance": "1.0",
    "rescue_instance": "1.0",
    "resize_instance": "1.0",
    "resume_instance": "1.0",
    "revert_resize": "1.0",
    "rollback_live_migration_at_destination": "1.0",
    "set_admin_password": "1.0",
    "shelve_instance": "1.0",
    "shelve_offload_instance": "1.0",
    "snapshot_instance": "1.0",
    "start_instance": "1.0",
    "stop_instance": "1.0",
    "suspend_instance": "1.0",
    "terminate_instance": "1.0",
    "unpause_instance": "1.0",
    "unrescue_instance": "1.0",
    "unshelve_instance": "1.0",
    "validate_console_port": "1.0",
})

CONDUCTOR = RPCInterface("conductor", version="1.0", binary="nova-conductor", methods={
    "build_instances": "1.0",
    "live_migrate_instance": "1.0",
    "migrate_server": "1.0",
    "unshelve_instance": "1.0",
})

SCHEDULER = RPCInterface("scheduler", version="1.0", binary="nova-scheduler", methods={
    "select_destinations": "1.0",
})

# The Networking API's operations, for the compute side and the Compute API's proxies (the network
# service's REST API calls the manager in its own process, not over the bus).
NETWORK = RPCInterface("network", version="1.0", binary="nefos-network", methods={
    **{f"{verb}_{resource}": "1.0"
       for resource in ("network", "subnet", "port", "router", "floatingip", "security_group",
                        "security_group_rule")
       for verb in ("create", "get", "update", "delete")},
    **{f"list_{resources}": "1.0"
       for resources in ("networks", "subnets", "ports", "routers", "floatingips", "security_groups",
                         "security_group_rules", "quotas")},
    "add_router_interface": "1.0",
    "remove_router_interface": "1.0",
    "get_quota": "1.0",
    "get_quota_default": "1.0",
    "get_quota_details": "1.0",
    "update_quota": "1.0",
    "delete_quota": "1.0",
    "get_auto_allocated_topology": "1.0",
    "delete_auto_allocated_topology": "1.0",
})

# Agents -> the network service (Neutron's q-plugin and q-l3-plugin topics).
PLUGIN = RPCInterface("q-plugin", version="1.0", methods={
    "dhcp_ready_on_ports": "1.0",
    "get_device_details": "1.0",
    "update_device_down": "1.0",
    "update_device_up": "1.0",
})

L3_PLUGIN = RPCInterface("q-l3-plugin", version="1.0", methods={
    "sync_routers": "1.0",
})

# The network service -> every agent (fanout).
DHCP_AGENT = RPCInterface("dhcp_agent", version="1.0", methods={
    "network_changed": "1.0",
})

L3_AGENT = RPCInterface("l3_agent", version="1.0", methods={
    "routers_updated": "1.0",
})

ALL = (COMPUTE, CONDUCTOR, SCHEDULER, NETWORK, PLUGIN, L3_PLUGIN, DHCP_AGENT, L3_AGENT)
BY_TOPIC = {interface.topic: interface for interface in ALL}

# Release names an [upgrade_levels] option may name (Nova's release aliases): each topic's version
# in that release (a topic missing: 1.0).
RELEASES: dict[str, dict[str, str]] = {
    "0.9": {interface.topic: "1.0" for interface in ALL},
}
