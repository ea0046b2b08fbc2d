"""Host filters: each says whether a host may take one instance of the request."""

from __future__ import annotations

from nefos.scheduler.host_state import HostState


def compute_filter(host: HostState, spec: dict) -> bool:
    """The host's compute service is enabled and up."""
    return host.service_up and not host.service_disabled


def availability_zone_filter(host: HostState, spec: dict) -> bool:
    az = spec.get("availability_zone")
    return not az or host.availability_zone == az


def resources_filter(host: HostState, spec: dict) -> bool:
    """RAM, VCPU and disk fit, counting allocation ratios (the claim re-checks atomically)."""
    flavor = spec["flavor"]
    disk = flavor.get("root_gb", 0) + flavor.get("ephemeral_gb", 0) + (flavor.get("swap", 0) + 1023) // 1024
    return (host.free_ram_mb >= flavor["memory_mb"] and host.free_vcpus >= flavor["vcpus"]
            and host.free_disk_gb >= disk)


def retry_filter(host: HostState, spec: dict) -> bool:
    """Hosts that already failed this build are not tried again."""
    tried = {h for h, _n in (spec.get("retry") or {}).get("hosts", [])}
    return host.host not in tried


def server_group_filter(host: HostState, spec: dict) -> bool:
    group = spec.get("instance_group")
    if not group:
        return True
    hosts = set(group.get("hosts") or [])
    if group["policy"] == "affinity":
        return not hosts or host.host in hosts
    if group["policy"] == "anti-affinity":
        return host.host not in hosts
    return True


ENABLED_FILTERS = [compute_filter, availability_zone_filter, resources_filter, retry_filter,
                   server_group_filter]


def filter_hosts(hosts: list[HostState], spec: dict) -> list[HostState]:
    forced = spec.get("force_hosts") or []
    if forced:
        # A forced host skips the filters, as in Nova (only the claim can refuse it).
        return [h for h in hosts if h.host in forced]
    return [h for h in hosts if all(f(h, spec) for f in ENABLED_FILTERS)]
