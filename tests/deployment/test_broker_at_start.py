"""A service started while the broker is unreachable waits for it, as Nova's services do through
oslo.messaging (its connection is tried again, the waits growing to 30 s, each failure logged),
and serves once it is there; a SIGTERM while it waits stops it cleanly.

The broker is the machine's RabbitMQ behind a loopback port of the test's own: nothing listens
there until the test forwards it to RabbitMQ."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from urllib.parse import urlsplit

import pytest

from nefos.cmd.allinone import free_port
from tests.compute.conftest import eventually
from tests.multihost.underlay import TcpForwarder
from tests.deployment.test_multiprocess import BIN, RABBIT_URL

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]


def _start(tmp_path, pg_url: str, port: int, name: str) -> tuple[subprocess.Popen, object]:
    broker = urlsplit(RABBIT_URL)
    url = RABBIT_URL.replace(broker.netloc, f"{broker.username}:{broker.password}@127.0.0.1:{port}")
    env = dict(os.environ, NEFOS_DATABASE_URL=pg_url, NEFOS_BUS_URL=url,
               NEFOS_CONTROL_EXCHANGE=f"nefos-test-{uuid.uuid4().hex[:8]}", NEFOS_AUTH_STRATEGY="noauth")
    subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(tmp_path)], env=env, check=True,
                   capture_output=True)
    log_path = tmp_path / f"{name}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(BIN / "nefos"), "scheduler", "--state-dir", str(tmp_path)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log_path


async def _logged(proc, log_path, text: str, timeout: float) -> None:
    async def seen():
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
        return text in log_path.read_text()
    await eventually(seen, timeout=timeout, interval=0.1)


async def serves_once_forwarded(proc, log_path, waiting: str, started: str, listen_port: int, target: tuple) -> None:
    """``proc`` logs ``waiting`` (what it cannot reach is behind ``listen_port``, where nothing
    listens); once the port is forwarded to ``target`` (host, port) it logs ``started`` and stops
    cleanly on SIGTERM."""
    forwarder = TcpForwarder()
    try:
        await _logged(proc, log_path, waiting, timeout=60)
        forwarder.forward("127.0.0.1", target[1], target[0], listen_port=listen_port)
        # Its next attempt (within 30 s of the last) gets through, and it starts.
        await _logged(proc, log_path, started, timeout=90)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        forwarder.close()


async def stops_on_sigterm_while(proc, log_path, waiting: str) -> None:
    """A SIGTERM while ``proc`` waits (it logged ``waiting``) ends it at once, with 0."""
    try:
        await _logged(proc, log_path, waiting, timeout=60)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0, log_path.read_text()[-3000:]
        assert time.monotonic() - sent < 10
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_a_service_started_before_the_broker_waits_for_it_and_serves(tmp_path, pg_url):
    port = free_port()
    proc, log_path = _start(tmp_path, pg_url, port, "scheduler")
    broker = urlsplit(RABBIT_URL)
    await serves_once_forwarded(proc, log_path, "message bus unreachable", "scheduler started", port,
                                (broker.hostname, broker.port or 5672))


async def test_a_service_waiting_for_the_broker_stops_on_sigterm(tmp_path, pg_url):
    proc, log_path = _start(tmp_path, pg_url, free_port(), "scheduler")
    await stops_on_sigterm_while(proc, log_path, "message bus unreachable")
