"""The aggregate and hint filters, on host states built by hand (Nova's filter semantics)."""

from __future__ import annotations

import pytest

from nefos.control.scheduler import extra_specs_ops, filters
from nefos.control.scheduler.host_state import HostState


def host(name="h1", aggregates=(), instances=(), zone="nova") -> HostState:
    return HostState(host=name, node=f"{name}.node", node_id=1, availability_zone=zone, service_up=True,
                     service_disabled=False, vcpus=8, vcpus_used=0, memory_mb=8192, memory_mb_used=0,
                     local_gb=100, local_gb_used=0, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0,
                     disk_allocation_ratio=1.0, failed_builds=0, instances=set(instances),
                     aggregates=[dict(a) for a in aggregates])


def spec(extra_specs=None, project="p1", hints=None, zone=None) -> dict:
    return {"flavor": {"vcpus": 1, "memory_mb": 64, "root_gb": 1, "extra_specs": extra_specs or {}},
            "project_id": project, "scheduler_hints": hints or {}, "availability_zone": zone}


@pytest.mark.parametrize("value, requirement, expected", [
    ("true", "true", True), ("true", "false", False), ("4", "= 2", True), ("1", "= 2", False),
    ("2", "== 2", True), ("2", "!= 2", False), ("3", ">= 2", True), ("3", "<= 2", False),
    ("abc", "s== abc", True), ("abc", "s!= abc", False), ("b", "s> a", True), ("b", "s< a", False),
    ("b", "s>= b", True), ("b", "s<= a", False), ("sse4 avx", "<in> avx", True), ("sse4", "<in> avx", False),
    ("sse4 avx", "<all-in> sse4 avx", True), ("sse4", "<all-in> sse4 avx", False),
    ("v2", "<or> v1 <or> v2", True), ("v3", "<or> v1 <or> v2", False), ("x", "= 2", False),
    (None, "= 2", False), ("= 2", "= 2", False), ("", "", True),
])
def test_extra_spec_operators(value, requirement, expected):
    assert extra_specs_ops.match(value, requirement) is expected


def test_aggregate_instance_extra_specs_filter():
    f = filters.aggregate_instance_extra_specs_filter
    ssd = host(aggregates=[{"ssd": "true", "gpu": "a, b"}])
    plain = host(aggregates=[])
    assert f(plain, spec()) and f(ssd, spec())
    assert f(ssd, spec({"aggregate_instance_extra_specs:ssd": "true"}))
    assert not f(plain, spec({"aggregate_instance_extra_specs:ssd": "true"}))
    assert not f(ssd, spec({"aggregate_instance_extra_specs:ssd": "false"}))
    assert f(ssd, spec({"ssd": "true"}))  # a bare key is matched too, as in Nova
    assert f(ssd, spec({"gpu": "b"}))  # comma-separated aggregate values are split
    assert f(plain, spec({"hw:cpu_policy": "dedicated"}))  # other scopes are not this filter's
    assert f(ssd, spec({"aggregate_instance_extra_specs:ssd": "<or> false <or> true"}))
    assert not f(ssd, spec({"ssd": "true", "missing": "x"}))


def test_aggregate_multi_tenancy_isolation():
    f = filters.aggregate_multi_tenancy_isolation
    isolated = host(aggregates=[{"filter_tenant_id": "p1,p2"}, {"filter_tenant_id_2": "p3"}])
    assert f(isolated, spec(project="p1")) and f(isolated, spec(project="p3"))
    assert not f(isolated, spec(project="p9"))
    assert f(host(aggregates=[{"other": "x"}]), spec(project="p9"))
    assert f(host(), spec(project="p9"))


def test_availability_zone_filter():
    f = filters.availability_zone_filter
    assert f(host(zone="z1"), spec(zone="z1")) and not f(host(zone="nova"), spec(zone="z1"))
    assert f(host(zone="z1"), spec())


def test_same_and_different_host_filters():
    a, b = host("a", instances={"s1"}), host("b")
    same, different = filters.same_host_filter, filters.different_host_filter
    assert [h.host for h in (a, b) if same(h, spec(hints={"same_host": "s1"}))] == ["a"]
    assert [h.host for h in (a, b) if same(h, spec(hints={"same_host": ["s1", "s2"]}))] == ["a"]
    assert [h.host for h in (a, b) if different(h, spec(hints={"different_host": "s1"}))] == ["b"]
    assert [h.host for h in (a, b) if different(h, spec(hints={"different_host": ["s1"]}))] == ["b"]
    assert all(same(h, spec()) and different(h, spec()) for h in (a, b))
    assert filters.hinted_instances(spec(hints={"same_host": "s1", "different_host": ["s2"]})) == {"s1", "s2"}


def test_the_filters_are_enabled_by_their_nova_names():
    for name in ("AggregateInstanceExtraSpecsFilter", "AggregateMultiTenancyIsolation", "AvailabilityZoneFilter",
                 "SameHostFilter", "DifferentHostFilter"):
        assert filters.FILTERS[name] in filters.ENABLED_FILTERS


def test_a_filter_runs_only_for_the_requests_that_ask_what_it_checks():
    plain = filters.filters_for(spec())
    assert filters.compute_filter in plain and filters.resources_filter in plain
    assert filters.availability_zone_filter not in plain and filters.same_host_filter not in plain
    asking = spec({"ssd": "true"}, hints={"same_host": "s1", "different_host": "s2"}, zone="z1")
    asking.update(retry={"hosts": [["h1", "h1.node"]]}, instance_group={"policy": "affinity", "hosts": []})
    assert filters.filters_for(asking) == filters.ENABLED_FILTERS


@pytest.mark.parametrize("request_spec", [
    spec(), spec(zone="z1"), spec({"ssd": "true"}), spec(hints={"same_host": "s1"}),
    spec(hints={"different_host": ["s1"]}), spec(project="p9"),
    {**spec(), "retry": {"hosts": [["a", "a.node"]]}},
    {**spec(), "instance_group": {"policy": "anti-affinity", "hosts": ["b"], "rules": {}}},
])
def test_filtering_with_the_filters_a_request_needs_keeps_what_every_filter_would(request_spec):
    hosts = [host("a", aggregates=[{"ssd": "true"}], instances={"s1"}, zone="z1"),
             host("b", aggregates=[{"filter_tenant_id": "p1"}]), host("c"),
             host("d", zone="z1", aggregates=[{"ssd": "false", "availability_zone": "z1"}])]
    hosts[2].service_up = False
    every = [h for h in hosts if all(f(h, request_spec) for f in filters.ENABLED_FILTERS)]
    assert filters.filter_hosts(hosts, request_spec) == every
