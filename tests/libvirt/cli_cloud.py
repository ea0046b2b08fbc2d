"""`nefos up` with real guests as a subprocess (its own state directory and ports, shipped defaults
otherwise), the `openstack` CLI against it, and SSH / ping from the host or a network's DHCP
namespace, retried until a deadline while guests boot."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from nefos.cmd.allinone import free_port
from tests.libvirt.conftest import qemu_reachable_dir, remove_domains_under

OPENSTACK = Path(sys.executable).parent / "openstack"
STARTED = "openstack --os-cloud nefos server list"  # the last line `nefos up` prints once up
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR")


class UpCloud:
    """One `nefos up --driver libvirt` and what a test made in it (removed at ``stop``)."""

    def __init__(self, extra_env: dict[str, str] | None = None):
        self.top = qemu_reachable_dir("nefos-up-")
        self.state = self.top / "up"
        self.state.mkdir(mode=0o700)
        self.log_path = self.state / "nefos-up.log"
        env = dict(os.environ)
        for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY"):
            env[f"NEFOS_{name}_API_PORT"] = str(free_port())
        env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())
        env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
        env["NEFOS_DASHBOARD_PORT"] = str(free_port())
        env.pop("OS_CLOUD", None)
        env.update(extra_env or {})
        self.env = env
        self.networks: set[str] = set()
        self.routers: set[str] = set()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([str(OPENSTACK.parent / "nefos"), "up", "--state-dir", str(self.state),
                                          "--driver", "libvirt"], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600  # a first start builds the tiny guest
        while STARTED not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("nefos up did not start:\n" + self.log())
            time.sleep(0.3)
        assert "compute driver: libvirt" in self.log(), self.log()

    def log(self) -> str:
        return self.log_path.read_text()

    def osc(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``openstack --os-cloud nefos ARGS`` as a user types it (the clouds.yaml `nefos up` wrote)."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.state),
               "OS_CLIENT_CONFIG_FILE": str(self.state / "clouds.yaml")}
        r = subprocess.run([str(OPENSTACK), "--os-cloud", "nefos", *args], env=env, capture_output=True, text=True,
                           timeout=300)
        assert not check or r.returncode == 0, f"openstack {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args: str):
        out = self.osc(*args, "-f", "json").stdout
        # `server create --wait` writes "Progress: N" lines (the build's progress) before the document.
        found = json.loads(out[min((i for i in (out.find("{"), out.find("[")) if i >= 0), default=0):])
        if args[:2] == ("network", "create"):
            self.networks.add(found["id"])
        if args[:2] == ("router", "create"):
            self.routers.add(found["id"])
        return found

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            remove_domains_under(self.state)  # no guest outlives the test
            # The L2 agent keeps its guests' firewall chains when it stops (guests outlive an agent's
            # restart); this cloud is gone for good: its chains (named after its state dir) go too.
            from nefos.agents.firewall import Firewall
            asyncio.run(Firewall(f"{self.state.resolve()}:localhost").remove())
            for net in self.networks:
                subprocess.run(["ip", "link", "del", "brq" + net[:11]], capture_output=True)
                subprocess.run(["ip", "netns", "del", "qdhcp-" + net], capture_output=True)
            for router in self.routers:
                subprocess.run(["ip", "netns", "del", "qrouter-" + router], capture_output=True)
            shutil.rmtree(self.top, ignore_errors=True)


def keygen(path: Path) -> Path:
    """A fresh ed25519 key pair (``path``, ``path``.pub), as a user makes one; returns the public key's path."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   capture_output=True, timeout=30)
    return path.with_suffix(".pub")


def ssh(key: Path, ip: str, command: str, netns: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """One SSH command into ``root@ip`` from the host (or from the namespace ``netns``)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*prefix, "ssh", "-i", str(key), *SSH_OPTIONS, f"root@{ip}", command],
                          capture_output=True, text=True, timeout=timeout)


def ssh_until(key: Path, ip: str, command: str, netns: str | None = None, timeout: float = 240,
              expect=lambda r: r.returncode == 0) -> subprocess.CompletedProcess:
    """``ssh`` retried until ``expect(result)`` (the guest still booting, its route or NAT not there
    yet) or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        r = ssh(key, ip, command, netns)
        if expect(r):
            return r
        assert time.monotonic() < deadline, (f"ssh root@{ip} {command!r} (from {netns or 'the host'}): "
                                             f"rc {r.returncode}\n{r.stdout}\n{r.stderr}")
        time.sleep(1)


def host_ping(ip: str) -> bool:
    return subprocess.run(["busybox", "ping", "-c", "1", "-W", "2", ip], capture_output=True).returncode == 0


class SourceRecorder:
    """A tiny TCP listener that records the source address of every
    connection and answers it with that address."""

    def __init__(self, address: str):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, (peer, _port) = self.sock.accept()
            except OSError:
                return
            with conn:
                self.seen.append(peer)
                conn.settimeout(5)
                try:
                    conn.recv(4096)
                    conn.sendall(f"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nseen-from {peer}\n".encode())
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=5)
