"""`nefos events`, run as a user runs it beside `nefos up` (shipped defaults, Keystone tokens): it
follows a boot live, replays the log from an id, and shows a project's user only its project."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx

from tests.logs.test_logs import _token, _wait_for
from tests.pipeline.test_up_command import _env, start_up


def _events(state, *args: str) -> list[str]:
    command = [sys.executable, "-m", "nefos.cli", "events", "--state-dir", str(state), *args]
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
        token, _project, compute = _token(state)  # the demo project's member
        headers = {"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.37"}
        images = httpx.get(f"{compute}/images", headers={"X-Auth-Token": token}, timeout=30).json()["images"]
        r = httpx.post(f"{compute}/servers", headers=headers, timeout=30, json={"server": {
            "name": "followed", "imageRef": images[0]["id"], "flavorRef": "42", "networks": "none"}})
        assert r.status_code == 202, r.text
        server_id = r.json()["server"]["id"]
        _wait_for(lambda: httpx.get(f"{compute}/servers/{server_id}", headers=headers, timeout=30)
                  .json()["server"]["status"] == "ACTIVE", "the server to be ACTIVE")
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
