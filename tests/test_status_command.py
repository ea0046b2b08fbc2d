"""`nefos status`, run as a user runs it beside `nefos up`: the endpoints, each compute host's state
and use, the servers by status; a friendly refusal when no cloud runs there."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx

from tests.logs.test_logs import _token, _wait_for
from tests.deployment.test_up_command import _env, start_up
from nefos.http_client import verified_tls


def _status(state, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nefos.cmd.cli", "status", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=120, env=env or _env() | {"COLUMNS": "200"})


def boot_as_demo(state, name: str) -> tuple[str, str]:
    """A server booted by the demo project's member of the `nefos up` at ``state``, once ACTIVE:
    its id and the Compute API's URL."""
    token, _project, compute = _token(state)
    headers = {"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.37"}
    images = httpx.get(f"{compute}/images", headers={"X-Auth-Token": token}, timeout=30,
                       verify=verified_tls()).json()["images"]
    r = httpx.post(f"{compute}/servers", headers=headers, timeout=30, json={"server": {
        "name": name, "imageRef": images[0]["id"], "flavorRef": "42", "networks": "none"}}, verify=verified_tls())
    assert r.status_code == 202, r.text
    server_id = r.json()["server"]["id"]
    _wait_for(lambda: httpx.get(f"{compute}/servers/{server_id}", headers=headers, timeout=30, verify=verified_tls())
              .json()["server"]["status"] == "ACTIVE", "the server to be ACTIVE")
    return server_id, compute


def test_status_shows_hosts_services_and_servers(tmp_path):
    proc, out = start_up(tmp_path, "--fake-hosts", "2")
    try:
        state = tmp_path / "state"
        _server_id, compute = boot_as_demo(state, "shown")
        result = _status(state)
        assert result.returncode == 0, result.stdout + result.stderr
        text = result.stdout
        assert compute in text  # the endpoints, from the catalog
        console_url = re.search(r"Web console: (http://\S+/)", text).group(1)
        answer = httpx.get(console_url + "login", timeout=30, verify=verified_tls())
        assert answer.status_code == 200, text  # it answers there
        host_lines = [line for line in text.splitlines() if "-1 " in line or "-2 " in line]
        assert len(host_lines) == 2 and all(" up " in line and " enabled " in line for line in host_lines), text
        assert any(" 1/" in line for line in host_lines), text  # the server's vCPU on one of them
        assert re.search(r"ACTIVE\W+1\W*$", text, re.M), text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.read_text()


def test_status_without_a_cloud_says_so(tmp_path):
    result = _status(tmp_path)
    assert result.returncode == 1
    assert "has `nefos up` run with this state directory?" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
