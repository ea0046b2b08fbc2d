"""Serving the APIs: a port that cannot be bound stops the cloud with the port named and leaves
nothing running; the ports the tests pick cannot be taken by the machine's own outgoing
connections in the moment before a server binds them."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nefos.cmd.allinone import Cloud, all_in_one_components, free_port
from nefos.config import load_config
from nefos.service import Runtime


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_picked_ports_are_free_distinct_and_outside_the_ephemeral_range():
    """A port from the kernel's ephemeral range can be taken by an outgoing connection (to the
    database, the broker) between being picked and being bound, so no picked port is from it."""
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < _ephemeral_low() for p in ports), [p for p in ports if p >= _ephemeral_low()]
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_a_taken_port_stops_the_cloud_naming_it_and_nothing_is_left_running(tmp_path):
    ports = {name: free_port() for name in ("compute_api_port", "network_api_port",
                                           "image_api_port", "identity_api_port")}
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth", **ports)
    rt = await Runtime.open(cfg, migrate=True)
    cloud = Cloud(rt, all_in_one_components(rt, fake_hosts=1))
    with socket.socket() as taken:  # the compute API starts last: everything else is up by then
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", ports["compute_api_port"]))
        taken.listen()
        try:
            with pytest.raises(RuntimeError, match=f"127.0.0.1:{ports['compute_api_port']}"):
                await cloud.start()
        finally:
            await rt.close()
    for name in ("network_api_port", "image_api_port", "identity_api_port"):
        assert _bindable(ports[name]), f"{name} {ports[name]} still served after a failed start"
    leftover = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not [n for n in leftover if n.startswith("http:")], leftover


def test_nefos_up_on_a_taken_port_says_which_and_exits(tmp_path):
    ports = {name: free_port() for name in ("COMPUTE_API_PORT", "NETWORK_API_PORT",
                                           "IMAGE_API_PORT", "IDENTITY_API_PORT")}
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME", "PATH")}
    env.update({f"NEFOS_{k}": str(v) for k, v in ports.items()})
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", ports["COMPUTE_API_PORT"]))
        taken.listen()
        proc = subprocess.run([sys.executable, "-m", "nefos.cmd.cli", "up", "--driver", "fake",
                               "--state-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=120, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"127.0.0.1:{ports['COMPUTE_API_PORT']}" in out and "Traceback" not in out, out
