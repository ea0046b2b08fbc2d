"""Every script in ``bench/`` runs at its smallest size and prints its figures, so none rots unseen.

The scripts are enumerated from the folder: one without an entry here (``SMALLEST``,
``ON_THE_HOST`` or ``COVERED_ELSEWHERE``) fails ``test_every_bench_script_has_a_smallest_size``.
Each in ``SMALLEST`` / ``ON_THE_HOST`` runs as a subprocess with this tree first on the path, at
sizes that take seconds but still go through what it measures (a cloud started, servers booted,
messages sent, statements run); it must exit 0 (each script exits non-zero when what it measures
fails: a server not ACTIVE, a build that did not wait for its event, a victim's request not served,
a broken scale invariant, the profiled script's own failure) and print its figures (every pattern
of its entry).

Two long runs have their short version in other modules and are not run again here, only started
with ``--help`` (their imports still resolve): ``bench/chaos.py`` (``tests/deployment/test_chaos.py``
runs it with 200 operations) and ``bench/fuzz.py`` (a wrapper that runs
``tests/fuzz/test_openapi_fuzz.py`` with more examples; that module runs in every suite run);
``test_the_long_runs_have_their_short_version_elsewhere`` checks that those modules still run them.

``bench/real_boot.py`` boots real guests (libvirt, QEMU, a DHCP namespace): its test is in the
``libvirt-host`` unit of work (``tests/conftest.py``), which runs what the machine has only one of
one test at a time.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))
NUMBER = r"[0-9]+(\.[0-9]+)?"


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    figures: tuple[str, ...]  # regular expressions the output (stdout + stderr) must each match
    marks: tuple = ()


SMALLEST: dict[str, list[Run]] = {
    "boot.py": [
        Run(("--servers", "4", "--hosts", "2", "--concurrency", "4", "--list-repeats", "1", "--stream-clients", "1"),
            (rf'"servers_per_s": {NUMBER}', rf'"cloud_cpu_ms_per_server": {NUMBER}', r'"errors": 0,',
             rf'"list_detail_1000_p50_ms": {NUMBER}', r'"stream_ids_missing_per_client": \[\s*0\s*\]',
             r'"stream_in_order": true')),
        Run(("--mode", "multi-process", "--servers", "2", "--hosts", "1", "--concurrency", "2", "--skip-list"),
            (rf'"servers_per_s": {NUMBER}', r'"errors": 0,', rf'"postgresql": {NUMBER}'),
            (pytest.mark.rabbit, pytest.mark.postgres)),
    ],
    "bus_roundtrip.py": [
        Run(("--messages", "20", "--concurrency", "2"),
            (rf'"call": {{"client_us": {NUMBER}, "server_us": {NUMBER}', rf'"cast": {{"client_us": {NUMBER}'),
            (pytest.mark.rabbit,)),
    ],
    "cpu_profile.py": [
        Run(("{tmp}/profile.out", "bench/metadata_starvation.py", "--connections", "2", "--requests", "1"),
            (rf"profile\.out: [1-9][0-9]* functions, {NUMBER} s of CPU", rf'"victim": \[\[200, {NUMBER}\]\]')),
    ],
    "events.py": [
        Run(("--servers", "3", "--warmup", "1"),
            (rf"port ACTIVE -> unblocked\s+n=3\s+p50\s+{NUMBER} ms", rf"event -> unblocked\s+n=3\s+p50\s+{NUMBER}")),
        Run(("--scenario", "stop", "--servers", "2"),
            (rf"guest stopped -> SHUTOFF\s+n=2\s+p50\s+{NUMBER} ms",)),
        Run(("--scenario", "sync", "--instances", "100", "--hosts", "2", "--diverged", "0.1"),
            (rf"power-state sync pass: 100 instances on 2 hosts, ([0-9]+) diverged: {NUMBER} s, \1 stopped",)),
    ],
    "host_background.py": [
        Run(("--hosts", "2", "--host-procs", "1", "--fills", "1", "--idle-seconds", "3", "--settle", "0",
             "--start-timeout", "120"),
            (r'"servers_per_host": 1,', rf'"conductor_cpu_percent": {NUMBER}', rf'"db_commits": {NUMBER}'),
            (pytest.mark.rabbit, pytest.mark.postgres)),
    ],
    "lists.py": [
        Run(("--rows", "60", "--projects", "3", "--repeats", "1"),
            (r'"images_member_page": 2[0-9],', rf'"ports_admin_page": {{\s*"p50_ms": {NUMBER}',
             r'"ports_by_device": 2\n')),
    ],
    "metadata_starvation.py": [
        Run(("--connections", "5", "--requests", "2", "--bound", "10"),
            (rf'"victim": \[\[200, {NUMBER}\], \[200, {NUMBER}\]\]', rf'"victim_max_s": {NUMBER}')),
        Run(("--connections", "5", "--requests", "2", "--bound", "10", "--slowloris"),
            (r'"slowloris": true', rf'"victim": \[\[200, {NUMBER}\], \[200, {NUMBER}\]\]')),
    ],
    "metrics_bounds.py": [
        Run(("--requests", "20", "--series", "100"),
            (rf"20 requests with made-up methods in {NUMBER} s: /metrics [0-9]+ -> [0-9]+ bytes",
             rf"'longest_loop_gap_ms': {NUMBER}, 'slowest_api_ms': {NUMBER}")),
    ],
    "port_allocation.py": [
        Run(("--servers", "3", "--runs", "1"),
            (rf'"median_ms": {NUMBER}', rf'"cpu_ms_per_port": {NUMBER}', r'"messages_per_port": 2\.0,')),
    ],
    "scale.py": [
        Run(("--hosts", "2", "--host-procs", "1", "--servers", "4", "--wave", "2", "--concurrency", "2",
             "--idle-seconds", "1", "--settle", "0", "--timeout", "120", "--start-timeout", "120"),
            (rf'"boots_per_s": {NUMBER}', r'"vm_states": {\s*"active": 4\s*}', r'"nodes_overcommitted": 0,',
             rf'"p50_ms": {NUMBER}'),
            (pytest.mark.rabbit, pytest.mark.postgres)),
    ],
    "scheduler_decisions.py": [
        Run(("--hosts", "10", "--decisions", "5", "--warmup", "1"),
            (r'"decisions": 5,', rf'"cpu_ms": {{\s*"p50": {NUMBER}')),
    ],
    "statement_cost.py": [
        Run(("--statements", "20",),
            (rf'"sqlite: read, a session each": {NUMBER}', rf'"pg-asyncpg: write": {NUMBER}'),
            (pytest.mark.postgres,)),
    ],
}

# Real guests: run in the libvirt-host unit of work.
ON_THE_HOST: dict[str, list[Run]] = {
    "real_boot.py": [
        Run(("--sequential", "1", "--concurrent", "1"),
            (rf"sequential \(1 boots\), seconds:\n(.*\n)*?\s+all but qemu start\s+{NUMBER}",
             rf"\s+ssh\s+{NUMBER}\s+{NUMBER}", r"1 at once \(1 boots\)",
             r"target: create -> first SSH command < 8 s at p50: [0-9.]+ s"),
            (pytest.mark.libvirt,)),
    ],
}

# The module that runs each one's short version, and what it must say to be running it.
COVERED_ELSEWHERE: dict[str, tuple[str, tuple[str, ...]]] = {
    "chaos.py": ("tests/deployment/test_chaos.py", ('"bench" / "chaos.py"', "subprocess.run")),
    "fuzz.py": ("tests/fuzz/test_openapi_fuzz.py",
                ('os.environ.get("NEFOS_FUZZ_EXAMPLES"', 'os.environ.get("NEFOS_FUZZ_SEED")',
                 'os.environ.get("NEFOS_FUZZ_SERVICES"')),
}


def _env() -> dict[str, str]:
    path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _params(table: dict[str, list[Run]]) -> list:
    return [pytest.param(script, run, marks=run.marks, id=script if len(runs) == 1 else f"{script}-{i + 1}")
            for script, runs in table.items() for i, run in enumerate(runs)]


def _run_at_smallest_size(script: str, run: Run, tmp_path: Path, timeout: float) -> None:
    args = [a.format(tmp=tmp_path) for a in run.args]
    # The scripts keep their clouds' state directories (their logs) in the temporary directory: one
    # per run, outside pytest's (0700, which a database server's own user cannot enter), removed
    # when the run passed.
    scratch = Path(tempfile.mkdtemp(prefix="nefos-bench-run-"))
    os.chmod(scratch, 0o755)
    done = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT,
                          env={**_env(), "TMPDIR": str(scratch)}, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"bench/{script} {' '.join(args)} exited {done.returncode}:\n{output[-6000:]}"
    missing = [pattern for pattern in run.figures if not re.search(pattern, output)]
    assert not missing, f"bench/{script} printed none of {missing}:\n{output[-6000:]}"
    shutil.rmtree(scratch, ignore_errors=True)


def test_every_bench_script_has_a_smallest_size():
    known = set(SMALLEST) | set(ON_THE_HOST) | set(COVERED_ELSEWHERE)
    assert not set(SCRIPTS) - known, f"bench/ scripts with no smallest size here: {sorted(set(SCRIPTS) - known)}"
    assert not known - set(SCRIPTS), f"entries for scripts bench/ no longer has: {sorted(known - set(SCRIPTS))}"


def test_the_long_runs_run_elsewhere_still_start():
    procs = {script: subprocess.Popen([sys.executable, str(BENCH / script), "--help"], cwd=ROOT, env=_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for script in COVERED_ELSEWHERE}
    failed = {}
    for script, proc in procs.items():
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage:" not in output:
            failed[script] = output[-3000:]
    assert not failed, failed


@pytest.mark.parametrize(("script", "run"), _params(SMALLEST))
def test_each_bench_script_runs_at_its_smallest_size_and_prints_its_figures(script, run, tmp_path):
    _run_at_smallest_size(script, run, tmp_path, timeout=300)


@pytest.mark.parametrize(("script", "run"), _params(ON_THE_HOST))
def test_the_real_guest_bench_runs_at_its_smallest_size_and_prints_its_figures(script, run, tmp_path):
    _run_at_smallest_size(script, run, tmp_path, timeout=600)


def test_the_long_runs_have_their_short_version_elsewhere():
    for script, (module, says) in COVERED_ELSEWHERE.items():
        text = (ROOT / module).read_text()
        missing = [needle for needle in says if needle not in text]
        assert not missing, f"{module} no longer runs bench/{script}'s short version: it lacks {missing}"
    assert "tests/fuzz/test_openapi_fuzz.py" in (BENCH / "fuzz.py").read_text()
