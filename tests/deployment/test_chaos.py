"""The chaos run, short: ``bench/chaos.py`` with 200 operations from 10 clients while a service
process is SIGKILLed every 2 s and RabbitMQ and PostgreSQL (its own instances) restart once each.
It exits non-zero on any broken invariant (a server not steady, usage that differs from what the
servers hold, a leaked port, allocation or guest, an accepted request that vanished, a 500)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.rabbit, pytest.mark.postgres]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"


def test_a_short_chaos_run_breaks_no_invariant():
    run = subprocess.run([sys.executable, str(BENCH), "--operations", "200", "--clients", "10",
                          "--kill-every", "2", "--seed", "7"], capture_output=True, text=True, timeout=900)
    print(run.stdout[-8000:], run.stderr[-12000:])
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-12000:]
    assert "violations: 0" in run.stdout
