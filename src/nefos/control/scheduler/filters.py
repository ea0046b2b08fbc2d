"""Host filters: each says whether a host may take one instance of the request.

``ENABLED_FILTERS`` names each filter as Nova does (Tempest's ``scheduler_enabled_filters``
lists the same names); the aggregate filters follow Nova's.
"""

from __future__ import annotations

from collections import defaultdict

from nefos.control.scheduler import extra_specs_ops
from nefos.model.server_group_rules import max_server_per_host
from nefos.control.scheduler.host_state import HostState


def compute_filter(host: HostState, spec: dict) -> bool:
    """The host's compute service is enabled and up."""
    return host.service_up and not host.service_disabled


def availability_zone_filter(host: HostState, spec: dict) -> bool:
    """The host's zone (its aggregates', else the default) is the requested one."""
    az = spec.get("availability_zone")
    return not az or host.availability_zone == az


def aggregate_metadata(host: HostState) -> dict[str, set[str]]:
    """Nova's ``aggregate_metadata_get_by_host``: each key of the host's aggregates with every
    value, comma-separated lists split."""
    metadata: dict[str, set[str]] = defaultdict(set)
    for md in host.aggregates:
        for key, value in md.items():
            metadata[key].update(v.strip() for v in value.split(","))
    return metadata


_AGGREGATE_SCOPE = "aggregate_instance_extra_specs"


def aggregate_instance_extra_specs_filter(host: HostState, spec: dict) -> bool:
    """Each flavor extra spec that is unscoped or scoped ``aggregate_instance_extra_specs:`` must
    match (Nova's extra-spec operators) a value of that key in the host's aggregates."""
    extra_specs = (spec.get("flavor") or {}).get("extra_specs") or {}
    if not extra_specs:
        return True
    metadata = aggregate_metadata(host)
    for key, wanted in extra_specs.items():
        scope, sep, rest = key.partition(":")
        if sep:
            if scope != _AGGREGATE_SCOPE:
                continue  # another filter's (or the driver's) extra spec
            key = rest
        values = metadata.get(key)
        if not values or not any(extra_specs_ops.match(v, wanted) for v in values):
            return False
    return True


def aggregate_multi_tenancy_isolation(host: HostState, spec: dict) -> bool:
    """A host in aggregates with ``filter_tenant_id*`` keys takes only those projects' instances."""
    if not host.aggregates:
        return True
    allowed: set[str] = set()
    for key, values in aggregate_metadata(host).items():
        if key.startswith("filter_tenant_id"):
            allowed |= values
    return not allowed or spec.get("project_id") in allowed


def _hinted_uuids(spec: dict, hint: str) -> list[str]:
    value = (spec.get("scheduler_hints") or {}).get(hint)
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def hinted_instances(spec: dict) -> set[str]:
    """The instances the request's ``same_host`` / ``different_host`` hints name."""
    return set(_hinted_uuids(spec, "same_host")) | set(_hinted_uuids(spec, "different_host"))


def same_host_filter(host: HostState, spec: dict) -> bool:
    """Hint ``same_host``: the host runs one of the named instances."""
    wanted = _hinted_uuids(spec, "same_host")
    return not wanted or bool(host.instances & set(wanted))


def different_host_filter(host: HostState, spec: dict) -> bool:
    """Hint ``different_host``: the host runs none of the named instances."""
    avoid = _hinted_uuids(spec, "different_host")
    return not avoid or not host.instances & set(avoid)


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


FILTERS = {
    "ComputeFilter": compute_filter,
    "AvailabilityZoneFilter": availability_zone_filter,
    "ResourcesFilter": resources_filter,  # Placement's allocation candidates, in Nova
    "RetryFilter": retry_filter,
    "ServerGroupAffinityFilter": server_group_filter,  # both group filters in one
    "AggregateInstanceExtraSpecsFilter": aggregate_instance_extra_specs_filter,
    "AggregateMultiTenancyIsolation": aggregate_multi_tenancy_isolation,
    "SameHostFilter": same_host_filter,
    "DifferentHostFilter": different_host_filter,
}
ENABLED_FILTERS = list(FILTERS.values())

# The filters that pass every host unless the request asks for what they check, with whether it
# does (Nova's ``run_filter_for_request``): a request that does not is spared running them on
# every host.
RUN_FOR_REQUEST = {
    availability_zone_filter: lambda spec: bool(spec.get("availability_zone")),
    retry_filter: lambda spec: bool((spec.get("retry") or {}).get("hosts")),
    server_group_filter: lambda spec: bool(spec.get("instance_group")),
    aggregate_instance_extra_specs_filter: lambda spec: bool((spec.get("flavor") or {}).get("extra_specs")),
    same_host_filter: lambda spec: bool(_hinted_uuids(spec, "same_host")),
    different_host_filter: lambda spec: bool(_hinted_uuids(spec, "different_host")),
}


def filters_for(spec: dict) -> list:
    """The enabled filters that may refuse a host for this request."""
    return [f for f in ENABLED_FILTERS if f not in RUN_FOR_REQUEST or RUN_FOR_REQUEST[f](spec)]


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
    for host_filter in filters_for(spec):
        hosts = [h for h in hosts if host_filter(h, spec)]
    return hosts
