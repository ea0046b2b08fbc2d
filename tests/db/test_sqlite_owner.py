"""One process owns a state directory's SQLite database: a second `nefos` process on it is
refused with a message that says what to do (it would otherwise make the first one's services wait
on SQLite's lock, on their event loop, for up to a minute); the services of one process share it;
the lock goes with the process."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import uuid

from sqlalchemy import select

from nefos.cmd.allinone import free_port
from nefos.config import load_config
from nefos.db import sqlite_owner
from nefos.db.models import Service
from nefos.service import Runtime


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME", "PATH")}
    for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY"):
        env[f"NEFOS_{name}_API_PORT"] = str(free_port())
    env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())
    env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
    env["NEFOS_DASHBOARD_PORT"] = str(free_port())
    return env


def _nefos(*argv: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nefos.cmd.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_second_process_on_the_same_sqlite_state_is_refused(tmp_path):
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        first = subprocess.Popen([sys.executable, "-m", "nefos.cmd.cli", "up", "--fake-hosts", "1",
                                  "--state-dir", str(state)], env=_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "openstack --os-cloud nefos server list" not in log.read_text():
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        for argv in (["db", "upgrade"], ["up", "--fake-hosts", "1"], ["conductor"]):
            second = _nefos(*argv, "--state-dir", str(state), env=_env())
            out = second.stdout + second.stderr
            assert second.returncode == 2, (argv, out)
            assert f"another Nefos process (pid {first.pid})" in out and "database_url" in out, out
            assert "Traceback" not in out, out
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0, log.read_text()
    # The lock went with the process.
    done = _nefos("db", "upgrade", "--state-dir", str(state), env=_env())
    assert done.returncode == 0, done.stdout + done.stderr


def _locked_by_someone(state) -> bool:
    """Whether ``nefos.lock`` is held: a descriptor of its own (as another process would have)
    cannot take it."""
    fd = os.open(state / sqlite_owner.LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


async def _read_and_write(rt, host: str) -> list[str]:
    """Writes a services row through ``rt``, then answers every such row ``rt`` reads."""
    async with rt.db.transaction() as s:
        s.add(Service(uuid=str(uuid.uuid4()), host=host, binary="nefos-test", topic="test"))
    async with rt.db.reader() as s:
        return list((await s.execute(select(Service.host).where(Service.binary == "nefos-test")
                                     .order_by(Service.host))).scalars())


async def test_the_services_of_one_process_share_the_database(tmp_path):
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth")
    first = await Runtime.open(cfg, migrate=True)
    try:
        assert _locked_by_someone(tmp_path)
        second = await Runtime.open(cfg)  # not refused: the lock is this process's
        assert await _read_and_write(first, "a") == ["a"]
        assert await _read_and_write(second, "b") == ["a", "b"]  # one database
        await second.close()
        assert _locked_by_someone(tmp_path)  # the first still uses it
        third = await Runtime.open(cfg)  # still owned by this process
        assert await _read_and_write(third, "c") == ["a", "b", "c"]
        await third.close()
        assert _locked_by_someone(tmp_path)
    finally:
        await first.close()
    assert not _locked_by_someone(tmp_path)  # the last one out released it
