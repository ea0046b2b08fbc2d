"""`nefos up --log-format json --log-file F`, run as a user runs it: one JSON object a line in F (mode
0600), an access line per request naming its request id, project, status and time, and a request's
global request id on the lines every service writes for it."""

from __future__ import annotations

import json
import signal
import stat
import time
import uuid

import httpx
import yaml

from tests.deployment.test_up_command import start_up
from nefos.http_client import verified_tls

FIELDS = {"time", "level", "logger", "message", "request_id", "global_request_id", "user_id", "project_id"}


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _token(state) -> tuple[str, str, str]:
    """(token, project id, Compute API URL) of the admin in the clouds.yaml `nefos up` wrote."""
    auth = yaml.safe_load((state / "clouds.yaml").read_text())["clouds"]["nefos"]["auth"]
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": auth["username"], "password": auth["password"],
        "domain": {"name": auth.get("user_domain_name", "Default")}}}},
        "scope": {"project": {"name": auth["project_name"],
                              "domain": {"name": auth.get("project_domain_name", "Default")}}}}}
    r = httpx.post(auth["auth_url"].rstrip("/") + "/auth/tokens", json=body, timeout=30, verify=verified_tls())
    assert r.status_code == 201, r.text
    compute = next(e["url"] for s in r.json()["token"]["catalog"] if s["type"] == "compute"
                   for e in s["endpoints"] if e["interface"] == "public")
    return r.headers["x-subject-token"], r.json()["token"]["project"]["id"], compute


def _wait_for(predicate, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def test_json_log_file_with_access_lines_and_the_global_request_id(tmp_path):
    log_file = tmp_path / "logs" / "nefos.json"
    proc, out = start_up(tmp_path, "--fake-hosts", "1", "--log-format", "json", "--log-file", str(log_file),
                         "--debug")
    try:
        assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
        token, project, compute = _token(tmp_path / "state")
        headers = {"X-Auth-Token": token}
        # A refused request has its access line, under the request id it was answered with.
        anonymous = httpx.get(f"{compute}/servers", timeout=30, verify=verified_tls())
        assert anonymous.status_code == 401
        # A create under a global request id of the caller's own.
        global_id = f"req-{uuid.uuid4()}"
        images = httpx.get(f"{compute}/images", headers=headers, timeout=30, verify=verified_tls()).json()["images"]
        r = httpx.post(f"{compute}/servers", timeout=30,
                       headers={**headers, "X-OpenStack-Request-Id": global_id, "OpenStack-API-Version": "compute 2.37"},
                       json={"server": {"name": "logged", "imageRef": images[0]["id"], "flavorRef": "42",
                                        "networks": "none"}}, verify=verified_tls())
        assert r.status_code == 202, r.text
        create_id = r.headers["x-openstack-request-id"]
        server_id = r.json()["server"]["id"]

        def active():
            got = httpx.get(f"{compute}/servers/{server_id}", headers=headers, timeout=30,
                            verify=verified_tls()).json()["server"]
            assert got["status"] != "ERROR", got
            return got["status"] == "ACTIVE"
        _wait_for(active, "the server to be ACTIVE")

        records = _wait_for(lambda: [r for r in _records(log_file) if r.get("global_request_id") == global_id
                                     and r["logger"].startswith("nefos.host.compute")] and _records(log_file),
                            "the compute host's lines under the global request id")
        assert all(FIELDS <= set(r) for r in records), [r for r in records if not FIELDS <= set(r)][:3]

        refused = [r for r in records if r["logger"] == "nefos.access" and r["request_id"] ==
                   anonymous.headers["x-openstack-request-id"]]
        assert len(refused) == 1 and refused[0]["status"] == 401 and refused[0]["project_id"] == "-", refused
        [access] = [r for r in records if r["logger"] == "nefos.access" and r["request_id"] == create_id]
        assert (access["method"], access["path"], access["status"]) == ("POST", "/v2.1/servers", 202)
        assert access["global_request_id"] == global_id and access["project_id"] == project
        assert access["duration"] >= 0 and access["length"] > 0 and access["client"] == "127.0.0.1"
        assert '"POST /v2.1/servers" status: 202' in access["message"]

        # The global request id is on the lines of every service the create went through: the API's
        # access line, the compute host's, and (--debug) each call and cast a service ran for it.
        mine = [r for r in records if r.get("global_request_id") == global_id]
        assert any(r["logger"] == "nefos.host.compute.manager" and "took" in r["message"] for r in mine), mine
        received = {r["message"].split(".")[0] for r in mine
                    if r["logger"] == "nefos.bus.base" and " received (version " in r["message"]}
        assert {"conductor", "scheduler", "compute"} <= received, received
        # Nothing went to standard error's log lines but what the command prints for its user.
        assert "nefos.access" not in out.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.read_text()


def test_text_access_lines_on_standard_error_by_default(tmp_path):
    """The shipped defaults: text lines on standard error, each with its request's ids, user and
    project; a path is logged as sent, so a %0A in it cannot forge a line."""
    import re
    proc, out = start_up(tmp_path, "--fake-hosts", "1")
    try:
        token, project, compute = _token(tmp_path / "state")
        r = httpx.get(f"{compute}/servers", headers={"X-Auth-Token": token}, timeout=30, verify=verified_tls())
        assert r.status_code == 200
        forged = httpx.get(f"{compute}/servers%0A2026-01-01 INFO nefos.access forged", timeout=30,
                           verify=verified_tls())
        assert forged.status_code in (401, 404)
        line = re.compile(r"INFO nefos\.access \[- " + re.escape(r.headers["x-openstack-request-id"]) +
                          r" [0-9a-f]{32} " + project + r'\] 127\.0\.0\.1 "GET /v2\.1/servers" status: 200 '
                          r"len: \d+ time: \d+\.\d{4}$", re.M)
        _wait_for(lambda: line.search(out.read_text()), "the access line")
        text = _wait_for(lambda: "%0A2026-01-01" in out.read_text() and out.read_text(), "the forged path's line")
        assert not re.search(r"^2026-01-01 INFO nefos\.access forged", text, re.M)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.read_text()
