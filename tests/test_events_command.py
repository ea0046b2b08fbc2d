"""`nefos events`, run as a user runs it beside `nefos up` (shipped defaults, Keystone tokens): it
follows a boot live, replays the log from an id, and shows a project's user only its project."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.deployment.test_up_command import _env, start_up
from tests.test_status_command import boot_as_demo


def _events(state, *args: str) -> list[str]:
    command = [sys.executable, "-m", "nefos.cmd.cli", "events", "--state-dir", str(state), *args]
    return command


def test_events_follows_a_boot_and_replays_the_log(tmp_path):
    proc, out = start_up(tmp_path, "--fake-hosts", "1")
    try:
        state = tmp_path / "state"
        env = _env() | {"COLUMNS": "200"}
        # Started before the boot: it ends once it printed the server's creation.
        live = subprocess.Popen(_events(state, "--type", "server.created", "--count", "1", "--timeout", "120"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        connected = live.stdout.readline()
        assert "following the events after id" in connected, connected
        server_id, _compute = boot_as_demo(state, "followed")
        printed, _ = live.communicate(timeout=120)
        assert live.returncode == 0, printed
        assert "server.created" in printed and server_id in printed and "name=followed" in printed, printed

        # The log from its start, bounded: the admin sees the steps, the state changes and the host.
        replay = subprocess.run(_events(state, "--since", "0", "--timeout", "1"), capture_output=True, text=True,
                                timeout=120, env=env)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        lines = [line for line in replay.stdout.splitlines() if server_id in line]
        assert any("server.step.finished" in line and "compute_spawn Success" in line for line in lines), lines
        assert any("server.updated" in line and "ACTIVE" in line for line in lines), lines
        assert "host.up" in replay.stdout
        # The demo project's user: its server, no host.
        mine = subprocess.run(_events(state, "--os-cloud", "nefos", "--since", "0", "--timeout", "1"),
                              capture_output=True, text=True, timeout=120, env=env)
        assert mine.returncode == 0, mine.stdout + mine.stderr
        assert server_id in mine.stdout and "host." not in mine.stdout
        # A member asking for every project: refused, said without a traceback.
        refused = subprocess.run(_events(state, "--os-cloud", "nefos", "--project", "0" * 32, "--timeout", "0"),
                                 capture_output=True, text=True, timeout=120, env=env)
        assert refused.returncode == 1 and "403" in refused.stdout and "Traceback" not in refused.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.read_text()
