"""Host weighers: normalised per weigher, then summed with their multipliers (as Nova does)."""

from __future__ import annotations

from typing import Callable

from nefos.control.scheduler.host_state import HostState


def _normalise(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return [0.0 for _ in values]
    return [(v - lo) / (hi - lo) for v in values]


def ram_weigher(host: HostState, spec: dict) -> float:
    return host.free_ram_mb


def build_failure_weigher(host: HostState, spec: dict) -> float:
    # Recent failures push a host down without taking it out of service.
    return -host.failed_builds


def _group_hosts(spec: dict) -> list[str]:
    group = spec.get("instance_group") or {}
    return list(group.get("hosts") or [])


def soft_affinity_weigher(host: HostState, spec: dict) -> float:
    group = spec.get("instance_group") or {}
    if group.get("policy") != "soft-affinity":
        return 0.0
    return float(_group_hosts(spec).count(host.host))


def soft_anti_affinity_weigher(host: HostState, spec: dict) -> float:
    group = spec.get("instance_group") or {}
    if group.get("policy") != "soft-anti-affinity":
        return 0.0
    return -float(_group_hosts(spec).count(host.host))


def weighers(cfg) -> list[tuple[Callable[[HostState, dict], float], float]]:
    return [
        (ram_weigher, cfg.ram_weight_multiplier),
        (build_failure_weigher, cfg.build_failure_weight_multiplier),
        (soft_affinity_weigher, cfg.soft_affinity_weight_multiplier),
        (soft_anti_affinity_weigher, cfg.soft_anti_affinity_weight_multiplier),
    ]


def weigh_hosts(hosts: list[HostState], spec: dict, cfg) -> list[HostState]:
    """Hosts best first."""
    if len(hosts) <= 1:
        return list(hosts)
    totals = [0.0] * len(hosts)
    for weigher, multiplier in weighers(cfg):
        if not multiplier:
            continue
        for i, w in enumerate(_normalise([weigher(h, spec) for h in hosts])):
            totals[i] += multiplier * w
    order = sorted(range(len(hosts)), key=lambda i: totals[i], reverse=True)
    return [hosts[i] for i in order]
