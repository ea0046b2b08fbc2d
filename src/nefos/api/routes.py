"""Every Compute API router, in one list so a reader sees the whole surface."""

from __future__ import annotations

import importlib

ROUTERS = [
    "nefos.api.versions",
    "nefos.api.servers",
    "nefos.api.server_actions",
    "nefos.api.server_metadata",
    "nefos.api.server_tags",
    "nefos.api.server_topology",
    "nefos.api.server_ips",
    "nefos.api.server_interfaces",
    "nefos.api.remote_consoles",
    "nefos.api.console_auth_tokens",
    "nefos.api.instance_actions",
    "nefos.api.images",
    "nefos.api.image_metadata",
    "nefos.api.flavors",
    "nefos.api.keypairs",
    "nefos.api.limits",
    "nefos.api.availability_zones",
    "nefos.api.services",
    "nefos.api.aggregates",
    "nefos.api.hypervisors",
    "nefos.api.hypervisor_health",
    "nefos.api.events",
    "nefos.api.quota_sets",
    "nefos.api.server_groups",
    "nefos.api.server_external_events",
    "nefos.api.server_diagnostics",
    "nefos.api.server_password",
    "nefos.api.hosts",
    "nefos.api.extensions",
    "nefos.api.volumes",
    "nefos.api.volumes_boot",
    "nefos.api.security_groups",
    "nefos.api.networks",
    "nefos.api.floating_ips",
    "nefos.api.simple_tenant_usage",
    "nefos.api.instance_usage_audit_log",
    "nefos.api.migrations",
    "nefos.api.removed",
]


def include_all(app) -> None:
    for name in ROUTERS:
        app.include_router(importlib.import_module(name).router)
