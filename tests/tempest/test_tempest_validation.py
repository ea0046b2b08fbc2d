"""Tempest's tests that log into their guests over SSH, against `nefos up` with real guests.

The fake compute hosts of test_tempest.py have no guest to log into, so Tempest skips its
validation-requiring tests there (``[validation] run_validation = false``). Here `nefos up --driver
libvirt` boots the tiny guest for real: Tempest's dynamic credentials give each project a network,
a subnet and a router to the external network ``public``, and Tempest reaches every guest over SSH
(its own key pair, a floating IP on ``public``) before it hot-plugs and unplugs NICs. Only the
compute tests that need validation run (``harness.VALIDATION_TESTS``: test_attach_interfaces, device
tagging, the server tests that read the guest's hostname, vCPUs and disks), one at a time. The per-test results
are written to ``<tmp>/tempest-validation-results.json`` (NEFOS_TEMPEST_VALIDATION_RESULTS: copied
there too); report.py merges them into docs/compatibility.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import harness  # noqa: E402
from known_results import BLOCK_STORAGE, KNOWN_FAILURES, classify_skip  # noqa: E402

from tests.libvirt.cli_cloud import UpCloud  # noqa: E402
from tests.libvirt.conftest import ensure_libvirtd  # noqa: E402

pytestmark = [pytest.mark.tempest, pytest.mark.libvirt]

MIN_PASS_RATE = 0.85


def test_tempest_with_ssh_validation_into_real_guests(tempest_runs, tmp_path):
    ensure_libvirtd()
    # An external bridge and range of its own: tests/libvirt's clouds may be using br-ex-nefos and
    # DevStack's 172.24.4.0/24 at the same time (tests/conftest.py).
    cloud = UpCloud({"NEFOS_AUTH_STRATEGY": "keystone", "NEFOS_PASSWORD_HASH_ROUNDS": "12",
                     "NEFOS_L3_EXTERNAL_BRIDGE": "br-ex-tempest", "NEFOS_EXTERNAL_NETWORK_CIDR": "172.24.6.0/24",
                     "NEFOS_EXTERNAL_NETWORK_GATEWAY": "172.24.6.1"})
    try:
        work = tmp_path / "tempest"
        clouds = yaml.safe_load((cloud.state / "clouds.yaml").read_text())["clouds"]
        admin = clouds["nefos-admin"]
        prep = harness.prepare_cloud(admin, validation=True)
        harness.write_workspace(work, harness.tempest_conf(admin, prep, work, validation=True))
        tests = harness.validation_tests(work)
        assert tests, "no test of tempest.api.compute matches harness.VALIDATION_TESTS"
        started = time.monotonic()
        harness.run_tempest(work, tests, timeout=900)
        summary = harness.summarize(harness.results(work), tests)
        summary["seconds"] = round(time.monotonic() - started, 1)
    finally:
        cloud.stop()
    out = tmp_path / "tempest-validation-results.json"
    out.write_text(json.dumps(summary, indent=1))
    tempest_runs["validation"] = summary
    if os.environ.get("NEFOS_TEMPEST_VALIDATION_RESULTS"):
        shutil.copy(out, os.environ["NEFOS_TEMPEST_VALIDATION_RESULTS"])

    counts = summary["counts"]
    print(f"\nTempest with validation: {counts.get('success', 0)} passed, {counts.get('fail', 0)} failed, "
          f"{counts.get('skip', 0)} skipped of {summary['total']} in {summary['seconds']} s; results in {out}")
    failures = {t: e["details"].strip().splitlines()[-1:] for t, e in summary["tests"].items()
                if e["status"] == "fail"}
    unexpected = {t: d for t, d in failures.items() if t not in KNOWN_FAILURES}
    assert not unexpected, "unexpected failures:\n" + json.dumps(unexpected, indent=1) + \
        "\n(log: " + str(work / "tempest-run.log") + ", " + str(work / "logs" / "tempest.log") + ")"
    # Only a test that needs block storage too (device tagging of volumes) may skip here.
    skipped = {t: e["details"] for t, e in summary["tests"].items() if e["status"] not in ("success", "fail")
               and (classify_skip(e["details"]) or ("",))[0] != BLOCK_STORAGE}
    assert not skipped, f"skipped or not run with validation on: {skipped}"


def test_pass_rate_of_both_runs(tempest_runs):
    """At least 85 % of all of Tempest's compute tests pass: on the fake hosts, or (the tests that log
    into their guests) in the validation run on real guests."""
    import report
    missing = {"fake", "validation"} - set(tempest_runs)
    assert not missing, f"run tests/tempest/ whole: the {sorted(missing)} run(s) did not run in this session"
    both = report.merge(tempest_runs["fake"], tempest_runs["validation"])
    passed = both["counts"].get("success", 0)
    print(f"\nTempest, both runs: {passed} of {both['total']} passed ({100 * passed / both['total']:.1f} %)")
    assert passed / both["total"] >= MIN_PASS_RATE, (passed, both["total"], both["counts"])
