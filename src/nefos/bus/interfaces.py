"""Every RPC interface served on the bus, with its version history (``nefos.bus.versioning``).

Version 1.0 of each interface is exactly what Nefos 0.9.0 sent, whose messages carried no version
(a message without one is read as 1.0). To change an interface (docs/architecture.md, "Versioned
messages and rolling upgrades"):

* a new method: one line ``"new_method": "1.N",`` below, and ``version="1.N"``;
* a new argument of a method: ``args={"method": {"new_arg": "1.N"}}`` and ``version="1.N"``; a
  client pinned below 1.N leaves the argument out, so the server's method must give it a default
  that means what the older form meant (or the client method adapts by ``can_send_version``);
* removing a method or an argument, or changing what one means: a new major version (2.0) — the
  servers serve only one major version, so every client must be upgraded first;
* a new field of a typed payload (``nefos.bus.payloads``): the payload's next minor version, and
  each interface carrying it a new minor version that carries it
  (``payloads={"Instance": {"1.1": "1.0", "1.N": "1.1"}}``); a message sent as an older version
  (a pinned caller's, or the answer to an older caller) carries the older payload, the new field
  left out, so its receiver must give it the meaning it had before.

History (newest last, one line per version):

compute     1.0  the surface of Nefos 0.9.0 (moves as the Migration payload 1.0, request specs as
                 the RequestSpec payload 1.0, an attached interface as the VIF payload 1.0)
compute     1.1: rebuild_instance(migration) (evacuation onto this host)
compute     1.2: rebuild_instance(new_pass) (an evacuated guest's password)
conductor   1.0  the surface of Nefos 0.9.0 (Migration 1.0, RequestSpec 1.0)
conductor   1.1: evacuate_instance; the compute hosts' database surface (host_surface,
                 migration_surface: instances, actions, allocations, services, compute nodes,
                 event inbox, migrations), service_register with the service's RPC version;
                 instances as the Instance payload 1.0, their network info as VIF 1.0
conductor   1.2: host_deadline_candidates (a host's deadline pass in one call)
conductor   1.3: instance_progress (a host's consecutive writes on one instance in one call),
                 build_started(block_devices)
conductor   1.4: action_steps_interrupted (a restarted host ends the steps its killed process
                 left open)
conductor   1.5: evacuate_instance(new_pass) (the evacuated guest's password)
scheduler   1.0  the surface of Nefos 0.9.0 (RequestSpec 1.0)
scheduler   1.1: decision_stats
network     1.0  the Networking API operations of Nefos 0.9.0
network     1.1: networks_for_instance (a server create's networks, subnets, ports, fixed IPs
                 taken and port quota in one call)
network     1.2: create_port(binding_host_id) (a server's port made with the caller's authority
                 and bound with the service's in one call)
q-plugin    1.0  the L2/DHCP agents' reports of Nefos 0.9.0
q-plugin    1.1: the L2 agent's device lists, networks and L2 population entries
                 (get_devices_details_list, get_devices_on_host, get_known_devices,
                 get_network_ids, get_fdb_entries)
q-plugin    1.2: get_devices_admin_state (the L2 agent's periodic look at its ports' admin_state_up)
q-l3-plugin 1.0  the L3 agent's sync of Nefos 0.9.0
dhcp_agent  1.0  the network service's fanout to DHCP agents of Nefos 0.9.0
l3_agent    1.0  the network service's fanout to L3 agents of Nefos 0.9.0
q-securitygroup-plugin 1.0  the L2 agent's port filters
q-dhcp-plugin          1.0  the DHCP agent's networks, DHCP ports and DHCP ready
q-metadata             1.0  the metadata proxy's instance port look-up
q-reports-plugin       1.0  every agent's heartbeat (with the L2 agent's VXLAN address)
q-agent-notifier       1.0  the network service's L2 population fanout to the L2 agents
q-agent-notifier       1.1: port_update (a port's admin_state_up changed: its host's L2 agent applies it)
"""

from __future__ import annotations

from nefos.bus.payloads.migration import Migration
from nefos.bus.payloads.request_spec import RequestSpec
from nefos.bus.versioning import RPCInterface

# The payload arguments, by the name every method gives them.
_MOVES = {"migration": Migration, "request_spec": RequestSpec}

COMPUTE = RPCInterface("compute", version="1.2", binary="nova-compute", args={
    "rebuild_instance": {"migration": "1.1", "new_pass": "1.2"},
}, payloads={
    "Migration": {"1.0": "1.0"},
    "RequestSpec": {"1.0": "1.0"},
    "VIF": {"1.0": "1.0"},
}, typed_args=_MOVES, methods={
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

# The Compute API's requests (1.0) and, from 1.1, everything a compute host reads or writes of the
# database (nefos.control.conductor.host_surface and migration_surface; the host has no database).
CONDUCTOR = RPCInterface("conductor", version="1.5", binary="nova-conductor", args={
    "build_started": {"block_devices": "1.3"},
    "evacuate_instance": {"new_pass": "1.5"},
}, payloads={
    "Instance": {"1.1": "1.0"},
    "Migration": {"1.0": "1.0"},
    "RequestSpec": {"1.0": "1.0"},
    "VIF": {"1.1": "1.0"},
}, typed_args=_MOVES, methods={
    "build_instances": "1.0",
    "live_migrate_instance": "1.0",
    "migrate_server": "1.0",
    "unshelve_instance": "1.0",
    "evacuate_instance": "1.1",
    # nefos.control.conductor.host_surface
    "ready": "1.1",
    "instance_get": "1.1",
    "instance_task_state": "1.1",
    "instance_save": "1.1",
    "instance_save_with_fault": "1.1",
    "instance_terminated": "1.1",
    "build_started": "1.1",
    "image_meta": "1.1",
    "block_device_mappings": "1.1",
    "group_member_placements": "1.1",
    "host_instances": "1.1",
    "host_instance_states": "1.1",
    "host_unchanged_operations": "1.1",
    "unchanged_resized_instances": "1.1",
    "host_builds_started_before": "1.1",
    "host_tasks_unchanged_since": "1.1",
    "host_deadline_candidates": "1.2",
    "unfinished_action": "1.1",
    "action_record": "1.1",
    "action_event_start": "1.1",
    "action_event_finish": "1.1",
    "action_record_event": "1.1",
    "action_finish": "1.1",
    "instance_progress": "1.3",
    "action_finish_overtaken": "1.1",
    "action_steps_interrupted": "1.4",
    "allocation_release": "1.1",
    "allocation_of": "1.1",
    "reschedule_build": "1.1",
    "console_authorize": "1.1",
    "migration_set_status": "1.1",
    "service_register": "1.1",
    "service_heartbeat": "1.1",
    "service_set_host_enabled": "1.1",
    "service_record_hypervisor_connection": "1.1",
    "service_publish_vif_wait_stats": "1.1",
    "compute_node_identity": "1.1",
    "compute_node_update": "1.1",
    "compute_node_record_build_result": "1.1",
    "event_operation_begin": "1.1",
    "event_inbox_purge": "1.1",
    "event_inbox_stored": "1.1",
    "event_inbox_consume": "1.1",
    "event_inbox_record_processing": "1.1",
    # nefos.control.conductor.migration_surface
    "migration_save": "1.1",
    "migration_abort_before_move": "1.1",
    "resize_confirmed": "1.1",
    "resize_reverted_at_destination": "1.1",
    "resize_revert_finished": "1.1",
    "live_migration_roll_back": "1.1",
    "live_migration_completed": "1.1",
    "evacuation_done": "1.1",
    "migrations_of_host": "1.1",
})

SCHEDULER = RPCInterface("scheduler", version="1.1", binary="nova-scheduler", payloads={
    "RequestSpec": {"1.0": "1.0"},
}, typed_args={"request_spec": RequestSpec}, methods={
    "select_destinations": "1.0",
    "decision_stats": "1.1",
})

# The Networking API's operations, for the compute side and the Compute API's proxies (the network
# service's REST API calls the manager in its own process, not over the bus).
NETWORK = RPCInterface("network", version="1.2", binary="nefos-network", args={
    "create_port": {"binding_host_id": "1.2"},
}, methods={
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
    "networks_for_instance": "1.1",
})

# Agents -> the network service (Neutron's q-plugin, q-securitygroup-plugin, q-dhcp-plugin,
# q-metadata, q-reports-plugin and q-l3-plugin topics; nefos.clients.network_agents).
PLUGIN = RPCInterface("q-plugin", version="1.2", methods={
    # (a 0.9.0 DHCP agent's report; the DHCP agent now says it on q-dhcp-plugin)
    "dhcp_ready_on_ports": "1.0",
    "get_device_details": "1.0",
    "update_device_down": "1.0",
    "update_device_up": "1.0",
    "get_devices_details_list": "1.1",
    "get_devices_on_host": "1.1",
    "get_known_devices": "1.1",
    "get_network_ids": "1.1",
    "get_fdb_entries": "1.1",
    "get_devices_admin_state": "1.2",
})

SECURITY_GROUP_PLUGIN = RPCInterface("q-securitygroup-plugin", version="1.0", methods={
    "security_group_info_for_host": "1.0",
})

DHCP_PLUGIN = RPCInterface("q-dhcp-plugin", version="1.0", methods={
    "dhcp_ready_on_ports": "1.0",
    "get_active_networks_info": "1.0",
    "get_dhcp_port": "1.0",
    "release_dhcp_port": "1.0",
})

METADATA_PLUGIN = RPCInterface("q-metadata", version="1.0", methods={
    "get_instance_port": "1.0",
})

REPORTS_PLUGIN = RPCInterface("q-reports-plugin", version="1.0", methods={
    "report_state": "1.0",
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

# L2 population (Neutron's q-agent-notifier): the network service -> every L2 agent.
L2_AGENT = RPCInterface("q-agent-notifier", version="1.1", methods={
    "fdb_changed": "1.0",
    "port_update": "1.1",
})

ALL = (COMPUTE, CONDUCTOR, SCHEDULER, NETWORK, PLUGIN, SECURITY_GROUP_PLUGIN, DHCP_PLUGIN, METADATA_PLUGIN,
       REPORTS_PLUGIN, L3_PLUGIN, DHCP_AGENT, L3_AGENT, L2_AGENT)
BY_TOPIC = {interface.topic: interface for interface in ALL}

# The topics Nefos 0.9.0 served (every one at 1.0; the later topics did not exist yet).
TOPICS_OF_0_9 = ("compute", "conductor", "scheduler", "network", "q-plugin", "q-l3-plugin", "dhcp_agent",
                 "l3_agent")

# Release names an [upgrade_levels] option may name (Nova's release aliases): each topic's version
# in that release (a topic missing: 1.0).
RELEASES: dict[str, dict[str, str]] = {
    "0.9": {topic: "1.0" for topic in TOPICS_OF_0_9},
}
