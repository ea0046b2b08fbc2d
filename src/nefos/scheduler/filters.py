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
    hosts = list(group.get("hosts") or [])  # one entry per member
    if group["policy"] == "affinity":
        return not hosts or host.host in hosts
    if group["policy"] == "anti-affinity":
        return hosts.count(host.host) < max_server_per_host(group)
    return True


def max_server_per_host(group: dict) -> int:
    """An anti-affinity group's members allowed on one host: its ``max_server_per_host`` rule (2.64), else 1."""
    return int((group.get("rules") or {}).get("max_server_per_host", 1))


ENABLED_FILTERS = [compute_filter, availability_zone_filter, resources_filter, retry_filter,
                   server_group_filter]


def filter_hosts(hosts: list[HostState], spec: dict) -> list[HostState]:
    forced = spec.get("force_hosts") or []
    if forced:
        # A forced host skips the filters, as in Nova (only the claim can refuse it).
        return [h for h in hosts if h.host in forced]
    wanted = spec.get("requested_destination") or {}
    if wanted:
        # 2.74: a requested host/node narrows the candidates, and the filters still run (unlike forcing).
        hosts = [h for h in hosts if (not wanted.get("host") or h.host == wanted["host"])
                 and (not wanted.get("node") or h.node == wanted["node"])]
    return [h for h in hosts if all(f(h, spec) for f in ENABLED_FILTERS)]
