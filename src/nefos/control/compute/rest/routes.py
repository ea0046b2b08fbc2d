"""Every Compute API router, in one list so a reader sees the whole surface."""

from __future__ import annotations

import importlib

ROUTERS = [
    "nefos.control.compute.rest.versions",
    "nefos.control.compute.rest.servers",
    "nefos.control.compute.rest.server_actions",
    "nefos.control.compute.rest.server_metadata",
    "nefos.control.compute.rest.server_tags",
    "nefos.control.compute.rest.server_topology",
    "nefos.control.compute.rest.server_ips",
    "nefos.control.compute.rest.server_interfaces",
    "nefos.control.compute.rest.remote_consoles",
    "nefos.control.compute.rest.console_auth_tokens",
    "nefos.control.compute.rest.instance_actions",
    "nefos.control.compute.rest.images",
    "nefos.control.compute.rest.image_metadata",
    "nefos.control.compute.rest.flavors",
    "nefos.control.compute.rest.keypairs",
    "nefos.control.compute.rest.limits",
    "nefos.control.compute.rest.availability_zones",
    "nefos.control.compute.rest.services",
    "nefos.control.compute.rest.aggregates",
    "nefos.control.compute.rest.hypervisors",
    "nefos.control.compute.rest.hypervisor_health",
    "nefos.control.compute.rest.events",
    "nefos.control.compute.rest.quota_sets",
    "nefos.control.compute.rest.server_groups",
    "nefos.control.compute.rest.server_external_events",
    "nefos.control.compute.rest.server_diagnostics",
    "nefos.control.compute.rest.server_password",
    "nefos.control.compute.rest.hosts",
    "nefos.control.compute.rest.extensions",
    "nefos.control.compute.rest.volumes",
    "nefos.control.compute.rest.volumes_boot",
    "nefos.control.compute.rest.security_groups",
    "nefos.control.compute.rest.networks",
    "nefos.control.compute.rest.floating_ips",
    "nefos.control.compute.rest.simple_tenant_usage",
    "nefos.control.compute.rest.instance_usage_audit_log",
    "nefos.control.compute.rest.migrations",
    "nefos.control.compute.rest.removed",
]


def include_all(app) -> None:
    for name in ROUTERS:
        app.include_router(importlib.import_module(name).router)
