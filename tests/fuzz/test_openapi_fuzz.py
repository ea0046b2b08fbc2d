"""Generated requests against a `nefos up` with the shipped defaults: every operation of the four
APIs' OpenAPI documents, as an admin, a member of project A and a member of project B, each
request drawn by schemathesis from the documented parameters and request bodies (half of them with
the path naming real resources of project A: a server, a network, subnet, port, security group and
image). No answer is a 5xx, none breaks the documented response (status, content type, schema),
none takes 5 s; and afterwards the database still agrees with itself (quota usage = real usage, no
compute port without its instance, no allocation without an instance)."""

from __future__ import annotations

import datetime
import os
import sqlite3
import time
from collections import Counter

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance, response_schema_conformance, status_code_conformance)

from tests.isolation.helpers import image_id, make_tenancy, start_nefos, stop_nefos, wait_server
from nefos.http_client import verified_tls

# Examples per operation and caller: 5 in CI (about 4 000 requests); `python bench/fuzz.py
# --examples N` runs the long version (40: about 13 000 requests).
EXAMPLES = int(os.environ.get("NEFOS_FUZZ_EXAMPLES", "5"))
# Which examples are drawn: the same all day (a failure reproduces with NEFOS_FUZZ_SEED=<printed
# value>), other ones the next day, so the short CI run still covers more inputs over time.
SEED = int(os.environ.get("NEFOS_FUZZ_SEED") or datetime.date.today().strftime("%Y%m%d"))
SLOW = 5.0
DOCUMENTS = {"compute": "/openapi.json", "network": "/v2.0/openapi.json", "image": "/v2/openapi.json",
             "identity": "/openapi.json"}
# A comma-separated subset of DOCUMENTS' services, for a focused long run (bench/fuzz.py --services).
SERVICES = [s for s in os.environ.get("NEFOS_FUZZ_SERVICES", ",".join(DOCUMENTS)).split(",") if s]
CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    state = tmp_path_factory.mktemp("nefos-fuzz")
    proc, clouds = start_nefos(state, {"NEFOS_PASSWORD_HASH_ROUNDS": "12"})
    try:
        tenancy = make_tenancy(clouds, state)
        yield tenancy, _real_resources(tenancy)
    finally:
        stop_nefos(proc, state)


def _real_resources(cloud) -> dict[str, str]:
    """Project A's server, network, subnet, port, security group and image, so that half the
    generated requests name a resource that exists (the other half keep their generated ids)."""
    a = cloud.a

    def made(service, path, body, key):
        r = a.post(service, path, body)
        assert r.status_code in (201, 202), r.text
        return r.json()[key]["id"] if key else r.json()["id"]
    ids = {"networks": made("network", "/v2.0/networks", {"network": {"name": "fuzz"}}, "network")}
    ids["subnets"] = made("network", "/v2.0/subnets", {"subnet": {
        "network_id": ids["networks"], "ip_version": 4, "cidr": "10.77.0.0/24"}}, "subnet")
    ids["ports"] = made("network", "/v2.0/ports", {"port": {"network_id": ids["networks"]}}, "port")
    ids["security-groups"] = made("network", "/v2.0/security-groups", {"security_group": {"name": "fuzz"}},
                                  "security_group")
    ids["image_id"] = made("image", "/v2/images", {"name": "fuzz", "disk_format": "raw",
                                                   "container_format": "bare"}, None)
    ids["server_id"] = made("compute", "/servers", {"server": {
        "name": "fuzz", "imageRef": image_id(a), "flavorRef": "1", "networks": [{"uuid": ids["networks"]}]}},
        "server")
    wait_server(a, ids["server_id"])
    ids.update(project_id=cloud.a_project, user_id=a.user_id, flavor_id="1")
    return ids


def _with_real_ids(case, ids: dict[str, str]) -> None:
    """Name the real resources in ``case``'s path, except in a DELETE of the resource itself (the
    first such request would leave the other operations nothing to act on)."""
    for name in list(case.path_parameters or {}):
        if case.method == "DELETE" and case.path.endswith("{" + name + "}"):
            continue
        collection = case.path.split("/")[2] if case.path.count("/") > 2 else ""
        real = ids.get(collection) if name == "item_id" else ids.get(name)
        if real is not None:
            case.path_parameters[name] = real


def _fuzz(api, service: str, caller, ids: dict, counts: Counter, failures: list) -> None:
    base = api.auth_url if service == "identity" else api.catalog[service]
    document = httpx.get(base.rstrip("/") + DOCUMENTS[service], timeout=30, verify=verified_tls()).json()
    schema = schemathesis.openapi.from_dict(document)
    root = base.rstrip("/")
    for path in ("/v2.1", "/v3"):  # the documents' paths are absolute; the catalog URLs end in a version
        if root.endswith(path):
            root = root[: -len(path)]
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        streams = any("text/event-stream" in r.get("content", {})
                      for r in operation.definition.raw.get("responses", {}).values())

        @seed(SEED)
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(operation.as_strategy(), st.booleans())
        def one(case, real_ids):
            if real_ids:
                _with_real_ids(case, ids)
            if streams:  # a stream runs until its client leaves: this client asks for a bounded one
                case.query = {**(case.query or {}), "timeout": "0"}
            started = time.monotonic()
            response = case.call(base_url=root, session=session, headers={"X-Auth-Token": caller.token},
                                 timeout=SLOW * 2)
            elapsed = time.monotonic() - started
            counts[service] += 1
            counts[response.status_code // 100 * 100] += 1
            where = f"{caller.user_id[:6]} {case.method} {case.formatted_path} {str(case.body)[:200]}"
            if elapsed > SLOW:
                failures.append(f"{where}: took {elapsed:.1f} s")
            # A stream's body is Server-Sent Events, no JSON document to check against a schema: its
            # format is tests/events' (status and media type are still checked here).
            for check in (c for c in CHECKS if not (streams and c is response_schema_conformance)):
                try:
                    case.validate_response(response, checks=[check])
                except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 — each failure is recorded
                    failures.append(f"{where}: {response.status_code} {type(exc).__name__}: {str(exc)[:300]}")
        one()
    session.close()


def test_generated_requests_get_no_5xx_and_keep_the_documents(cloud):
    cloud, ids = cloud
    counts: Counter = Counter()
    failures: list[str] = []
    for service in SERVICES:
        for caller in (cloud.admin, cloud.a, cloud.b):
            _fuzz(caller, service, caller, ids, counts, failures)
    total = sum(counts[s] for s in SERVICES)
    print(f"\ngenerated requests: {total} {dict(counts)} ({EXAMPLES} examples, NEFOS_FUZZ_SEED={SEED})")
    if set(SERVICES) == set(DOCUMENTS):  # every operation drawn: about 330 requests per example
        assert total >= 250 * EXAMPLES, counts
    assert not [f for f in failures if " 5" in f.split(":")[1][:4] or "Server" in f], failures[:20]
    assert failures == [], f"{len(failures)} failures, first: {failures[:20]}"
    _check_invariants(cloud.state / "nefos.sqlite")


def _check_invariants(db_path) -> None:
    db = sqlite3.connect(db_path)
    live = {row[0]: row for row in db.execute(
        "SELECT uuid, project_id, vcpus, memory_mb FROM instances WHERE deleted = 0")}
    usage = {(p, r): n for p, r, n in db.execute("SELECT project_id, resource, in_use FROM quota_usages")}
    real = Counter()
    for _uuid, project, vcpus, ram in live.values():
        real[(project, "instances")] += 1
        real[(project, "cores")] += vcpus
        real[(project, "ram")] += ram
    for key in set(real) | {k for k in usage if k[1] in ("instances", "cores", "ram")}:
        assert usage.get(key, 0) == real.get(key, 0), (key, usage.get(key), real.get(key))
    orphans = [r for r in db.execute("SELECT id, device_id FROM ports WHERE device_owner LIKE 'compute:%'")
               if r[1] not in live]
    assert orphans == [], f"compute ports without their instance: {orphans}"
    stray = [r[0] for r in db.execute("SELECT consumer_uuid FROM allocations") if r[0] not in live]
    assert stray == [], f"allocations without an instance: {stray}"
