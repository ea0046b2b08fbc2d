"""Tempest's compute API tests (the subset in selected_tests.txt) against a real `nefos up`.

The run takes a few minutes (one test at a time, two fake compute hosts). Its per-test results are
written to ``<tmp>/tempest-results.json``; ``python tests/tempest/report.py <that file>`` renders
docs/compatibility.md from them. Set NEFOS_TEMPEST_RESULTS to also copy the results there.
"""

from __future__ import annotations

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
from known_failures import KNOWN_FAILURES  # noqa: E402

pytestmark = pytest.mark.tempest

MIN_PASS_RATE = 0.90


def test_tempest_compute_subset(cloud, tmp_path):
    work = tmp_path / "tempest"
    admin = cloud["clouds"]["nefos-admin"]
    prep = harness.prepare_cloud(admin)
    harness.write_workspace(work, harness.tempest_conf(admin, prep, work))
    tests = harness.selection()
    started = time.monotonic()
    harness.run_tempest(work, tests)
    summary = harness.summarize(harness.results(work), tests)
    summary["seconds"] = round(time.monotonic() - started, 1)
    out = tmp_path / "tempest-results.json"
    out.write_text(json.dumps(summary, indent=1))
    if os.environ.get("NEFOS_TEMPEST_RESULTS"):
        shutil.copy(out, os.environ["NEFOS_TEMPEST_RESULTS"])

    counts = summary["counts"]
    passed, failed = counts.get("success", 0), counts.get("fail", 0)
    ran = passed + failed
    print(f"\nTempest: {passed} passed, {failed} failed, {counts.get('skip', 0)} skipped of "
          f"{summary['total']} selected in {summary['seconds']} s; results in {out}")
    failures = {t: e["details"].strip().splitlines()[-1:] for t, e in summary["tests"].items()
                if e["status"] == "fail"}
    unexpected = {t: d for t, d in failures.items() if t not in KNOWN_FAILURES}
    missing = [t for t, e in summary["tests"].items() if e["status"] == "missing"]
    assert not missing, f"not reported by Tempest (bad test id?): {missing}"
    assert not unexpected, "unexpected failures:\n" + json.dumps(unexpected, indent=1) + \
        "\n(log: " + str(work / "tempest-run.log") + ")"
    assert ran and passed / summary["total"] >= MIN_PASS_RATE, (passed, summary["total"])
    for test, entry in summary["tests"].items():
        if entry["status"] == "skip":
            assert entry["details"].strip(), f"{test} was skipped without a reason"
