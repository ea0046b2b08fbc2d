"""A service started while its database is unreachable (restarting, or not up yet) waits for it, as
Nova's services retry their database at start (oslo.db), each failure logged, and serves once it
is there; a SIGTERM while it waits stops it cleanly. Its process does not exit for a database that
is away, so no supervisor's restart is needed to bring it back.

The database is the test's PostgreSQL behind a loopback port of the test's own: nothing listens
there until the test forwards it."""

from __future__ import annotations

import os
import subprocess
import uuid
from urllib.parse import urlsplit

import pytest

from nefos.cmd.allinone import free_port
from tests.deployment.test_broker_at_start import serves_once_forwarded, stops_on_sigterm_while
from tests.deployment.test_multiprocess import BIN, RABBIT_URL

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


def _start(tmp_path, pg_url: str, port: int, service: str) -> tuple[subprocess.Popen, object]:
    """``service`` on the migrated ``pg_url``, but through 127.0.0.1:``port``."""
    env = dict(os.environ, NEFOS_DATABASE_URL=pg_url, NEFOS_BUS_URL=RABBIT_URL,
               NEFOS_CONTROL_EXCHANGE=f"nefos-test-{uuid.uuid4().hex[:8]}", NEFOS_AUTH_STRATEGY="noauth")
    subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(tmp_path)], env=env, check=True,
                   capture_output=True)
    server = urlsplit(pg_url)
    env["NEFOS_DATABASE_URL"] = pg_url.replace(server.netloc, f"{server.username}@127.0.0.1:{port}")
    log_path = tmp_path / f"{service}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(BIN / "nefos"), service, "--state-dir", str(tmp_path)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log_path


@pytest.mark.parametrize("service, started", [("scheduler", "scheduler started"), ("api", "api started")])
async def test_a_service_started_before_its_database_waits_for_it_and_serves(tmp_path, pg_url, service, started):
    port = free_port()
    proc, log_path = _start(tmp_path, pg_url, port, service)
    server = urlsplit(pg_url)
    await serves_once_forwarded(proc, log_path, "database unreachable", started, port,
                                (server.hostname, server.port or 5432))


async def test_a_service_waiting_for_its_database_stops_on_sigterm(tmp_path, pg_url):
    proc, log_path = _start(tmp_path, pg_url, free_port(), "scheduler")
    await stops_on_sigterm_while(proc, log_path, "database unreachable")
