"""Every test of Tempest's ``tempest.api.compute`` against a real `nefos up` (two fake compute hosts).

Tempest runs with two workers (its dynamic credentials give each test class its own projects). The
tests that log into their guests over SSH skip here and run with real guests in
test_tempest_validation.py. Per-test results are written to ``<tmp>/tempest-results.json``;
``python tests/tempest/report.py <that file> [<validation results>]`` renders docs/compatibility.md
from them. Set NEFOS_TEMPEST_RESULTS to also copy the results there.

The run fails on a failure not in ``known_results.KNOWN_FAILURES``, on a skip no entry of
``known_results.SKIPS`` explains, on more than a handful of skips for any reason but block storage
and live migration. The pass rate of both runs together (at least 85 % of all the compute tests) is
checked by test_tempest_validation.py once the validation run is done.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
from known_results import BLOCK_STORAGE, HANDFUL, KNOWN_FAILURES, LIVE_MIGRATION, classify_skip  # noqa: E402

pytestmark = pytest.mark.tempest

CONCURRENCY = 2


def check_skips(summary: dict, exclude=frozenset()) -> None:
    """Every skip explained by known_results.SKIPS; no reason but block storage or live migration
    for more than a handful of tests."""
    unexplained, per_reason = {}, collections.Counter()
    for test, entry in summary["tests"].items():
        if entry["status"] != "skip" or test in exclude:
            continue
        found = classify_skip(entry["details"])
        if found is None:
            unexplained[test] = entry["details"].strip()[-200:]
        else:
            per_reason[found[0]] += 1
    assert not unexplained, "skips known_results.SKIPS does not explain:\n" + json.dumps(unexplained, indent=1)
    too_many = {r: n for r, n in per_reason.items() if n > HANDFUL and r not in (BLOCK_STORAGE, LIVE_MIGRATION)}
    assert not too_many, f"more than a handful of tests skipped for: {too_many}"


def test_tempest_compute_api(cloud, tempest_runs, tmp_path):
    work = tmp_path / "tempest"
    admin = cloud["clouds"]["nefos-admin"]
    prep = harness.prepare_cloud(admin)
    harness.write_workspace(work, harness.tempest_conf(admin, prep, work))
    tests = harness.all_compute_tests(work)
    validation = set(harness.validation_tests(work))
    started = time.monotonic()
    harness.run_tempest(work, tests, concurrency=CONCURRENCY)
    summary = harness.summarize(harness.results(work), tests)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["concurrency"] = CONCURRENCY
    out = tmp_path / "tempest-results.json"
    out.write_text(json.dumps(summary, indent=1))
    tempest_runs["fake"] = summary
    if os.environ.get("NEFOS_TEMPEST_RESULTS"):
        shutil.copy(out, os.environ["NEFOS_TEMPEST_RESULTS"])

    counts = summary["counts"]
    passed = counts.get("success", 0)
    print(f"\nTempest: {passed} passed, {counts.get('fail', 0)} failed, {counts.get('skip', 0)} skipped of "
          f"{summary['total']} in {summary['seconds']} s ({len(validation)} run with validation elsewhere); "
          f"results in {out}")
    assert len(tests) > 500, f"only {len(tests)} compute tests discovered"
    failures = {t: e["details"].strip().splitlines()[-1:] for t, e in summary["tests"].items()
                if e["status"] == "fail"}
    unexpected = {t: d for t, d in failures.items() if t not in KNOWN_FAILURES}
    missing = [t for t, e in summary["tests"].items() if e["status"] == "missing"]
    assert not missing, f"not reported by Tempest: {missing}"
    assert not unexpected, "unexpected failures:\n" + json.dumps(unexpected, indent=1) + \
        "\n(log: " + str(work / "tempest-run.log") + ")"
    check_skips(summary, exclude=validation)
    for test, entry in summary["tests"].items():
        if entry["status"] == "skip":
            assert entry["details"].strip(), f"{test} was skipped without a reason"
