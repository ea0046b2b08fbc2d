"""Database servers of a test's (or a bench run's) own: PostgreSQL and MariaDB on their own ports
and data directories, so stopping or restarting one disturbs nothing else on the machine.

Both servers refuse to run as root; as root they run as their packages' own users (postgres,
mysql). Authentication is open on loopback only (trust / passwordless root).

    server = OwnPostgres()
    server.start()
    server.create_database("nefos")
    ... server.restart() / server.stop() ...
    server.destroy()
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from nefos.cmd.allinone import free_port

PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1] if Path("/usr/lib/postgresql").exists() else None
START_TIMEOUT = 60.0


def _as(user: str, argv: list[str]) -> list[str]:
    """``argv`` run as ``user`` when we are root (the servers refuse root), else as ourselves."""
    return ["runuser", "-u", user, "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class _OwnServer:
    user = ""

    def __init__(self, root: Path | None = None):
        # A directory of our own under /tmp: pytest's are 0700, which the server's user can't enter.
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix=f"nefos-{self.user}-")) if root is None else Path(root)
        os.chmod(self.root, 0o755)
        self.data = self.root / self.user
        self.data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.data, self.user, self.user)
        self.port = free_port()

    running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


class OwnPostgres(_OwnServer):
    """A PostgreSQL server of our own (trust authentication, loopback only)."""

    user = "postgres"

    def __init__(self, root: Path | None = None, max_connections: int = 200):
        super().__init__(root)
        self.max_connections = max_connections
        _run(_as(self.user, [str(PG_BIN / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres"]))

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *argv: str) -> None:
        _run(_as(self.user, [
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(int(START_TIMEOUT)), *argv,
            "-o", f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                  f"-c max_connections={self.max_connections}",
            "-l", str(self.data / "log")]))

    def start(self) -> None:
        self._ctl("start")
        self.running = True

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")
        self.running = True

    def stop(self) -> None:
        # Immediate: connections are cut as in a crash, and the next start recovers.
        subprocess.run(_as(self.user, [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                                       "stop"]), capture_output=True)
        self.running = False

    def create_database(self, name: str) -> str:
        _run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name])
        return self.url(name)


class OwnMariaDB(_OwnServer):
    """A MariaDB server of our own (root without a password, loopback only)."""

    user = "mysql"

    def __init__(self, root: Path | None = None):
        super().__init__(root)
        self.proc: subprocess.Popen | None = None
        _run(_as(self.user, ["mariadb-install-db", f"--datadir={self.data}", "--auth-root-authentication-method=normal",
                             "--skip-test-db", "--skip-name-resolve"]))

    def url(self, database: str = "") -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        log = open(self.data / "server.log", "a")
        self.proc = subprocess.Popen(_as(self.user, [
            "mariadbd", "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.data / 'mysqld.sock'}", f"--pid-file={self.data / 'pid'}",
            "--skip-name-resolve", "--innodb-buffer-pool-size=32M", "--skip-log-bin"]),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"MariaDB did not start: see {self.data / 'server.log'}")
            time.sleep(0.05)
        self.running = True

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # SIGKILL: connections are cut as in a crash (InnoDB recovers on the next start).
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.running = False

    def create_database(self, name: str) -> str:
        _run(["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root",
              "-e", f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"])
        return self.url(name)
