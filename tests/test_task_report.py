"""SIGUSR2 makes a running service write what each of its tasks waits on (and its threads' stacks)
to standard error, and it goes on running."""

from __future__ import annotations

import asyncio
import io
import signal
import time

from nefos import task_report
from tests.deployment.test_up_command import start_up


async def test_the_report_names_each_task_and_where_it_waits():
    gate = asyncio.Event()
    waiter = asyncio.create_task(gate.wait(), name="waits-for-the-gate")
    await asyncio.sleep(0)
    out = io.StringIO()
    task_report.write(out)
    gate.set()
    await waiter
    text = out.getvalue()
    line = next(line for line in text.splitlines() if line.startswith("--- task waits-for-the-gate: waits at "))
    assert "asyncio/locks.py" in line and line.endswith(" wait"), line
    assert text.rstrip().endswith("==== end of task report ====")


def test_a_running_cloud_writes_its_report_on_sigusr2_and_goes_on(tmp_path):
    proc, log = start_up(tmp_path, "--fake-hosts", "1")
    try:
        proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while "==== end of task report ====" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        report = log.read_text().split("==== task report of pid", 1)[1]
        assert f" {proc.pid} at " in report.splitlines()[0]
        assert "--- task " in report and "==== threads ====" in report and "Thread 0x" in report, report[:3000]
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
