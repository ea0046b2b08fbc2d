"""The DHCP agent's dnsmasq runs as its own unprivileged user (not root), with its files readable by
that user's group alone, and still re-reads its hosts file after a change (SIGHUP, as that user);
its log stays bounded.
Real dnsmasq in a real namespace: root, iproute2 and dnsmasq-base needed."""

from __future__ import annotations

import asyncio
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from nefos.config import load_config
from nefos.context import admin_context
from nefos.agents.dhcp_agent import LOG_KEEP_BYTES, LOG_MAX_BYTES, RUNTIME_CONFS, DhcpAgent, dnsmasq_account
from nefos.control.network.service import component as network_component
from nefos.service import Runtime

# Runs as root with dnsmasq installed (scripts/setup-libvirt.sh, run by the test command).


async def _until(predicate, what: str, timeout: float = 15.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := predicate()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return value


def _uids(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(x) for x in line.split()[1:]]
    raise AssertionError("no Uid line")


async def _serve_and_check(state_dir: Path) -> Path:
    """Start the network service and a DHCP agent on ``state_dir``; one network with a port, then a
    second port; returns the directory the agent kept dnsmasq's files in."""
    cfg = load_config(state_dir=state_dir, auth_strategy="noauth", dhcp_agent_sync_interval=60.0)
    rt = await Runtime.open(cfg, migrate=True)
    network = network_component(rt)
    await network.start()
    agent = DhcpAgent(rt, "dhcp-user-test", interval=60.0)
    net = None
    try:
        await agent.start()
        ctx = admin_context()
        manager = network.manager
        net = await manager.create_network(ctx, {"name": "n"})
        await manager.create_subnet(ctx, {"network_id": net["id"], "cidr": "10.77.0.0/24", "ip_version": 4})
        first = await manager.create_port(ctx, {"network_id": net["id"]})
        d = agent.state_dir / net["id"]
        await _until(lambda: first["mac_address"] in ((d / "host").read_text() if (d / "host").exists() else "")
                     and net["id"] in agent._applied, "dnsmasq serving the first port")
        proc = agent._procs[net["id"]]
        name, uid, gid = dnsmasq_account()
        assert _uids(proc.pid) == [uid] * 4 and uid != 0  # real, effective, saved, filesystem
        for f in (d / "host", d / "opts"):
            st = f.stat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, gid, 0o640), f
        assert stat.S_IMODE(d.stat().st_mode) == 0o750 and d.stat().st_gid == gid
        assert stat.S_IMODE((d / "dnsmasq.log").stat().st_mode) == 0o600
        assert int((d / "pid").read_text()) == proc.pid  # written before it dropped root
        # A change: dnsmasq (as its user) re-reads the hosts file on SIGHUP, no restart.
        log = d / "dnsmasq.log"
        reads = log.read_text().count(f"read {d / 'host'}")
        second = await manager.create_port(ctx, {"network_id": net["id"]})
        await _until(lambda: log.read_text().count(f"read {d / 'host'}") > reads and
                     second["mac_address"] in (d / "host").read_text(), "dnsmasq re-reading its hosts file")
        assert "Permission denied" not in log.read_text()
        assert agent._procs[net["id"]].pid == proc.pid
        # Its log (guests' DHCP requests land there) is cut back at the next sync, and still read.
        with open(log, "ab") as f:
            f.write(b"DHCPDISCOVER(ns-x) 52:54:00:00:00:01 no address available\n" * 40000)
        assert log.stat().st_size > LOG_MAX_BYTES
        third = await manager.create_port(ctx, {"network_id": net["id"]})
        await _until(lambda: third["mac_address"] in (d / "host").read_text() and
                     log.stat().st_size < LOG_KEEP_BYTES + 4096 and
                     f"read {d / 'host'}" in log.read_bytes()[-4096:].decode(errors="replace"),
                     "the log cut back and dnsmasq re-reading its hosts file")
        return agent.state_dir
    finally:
        await agent.stop()
        await network.stop()
        await rt.close()
        if net is not None:
            subprocess.run(["ip", "link", "del", "brq" + net["id"][:11]], capture_output=True)


async def test_dnsmasq_runs_as_its_user_with_the_default_dhcp_confs():
    parent = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        parent.chmod(0o755)  # as /var/lib: the state directory below it is Nefos's own
        state = parent / "state"
        confs = await _serve_and_check(state)
        assert confs == (state / "dhcp").resolve()
        assert stat.S_IMODE(state.stat().st_mode) == 0o711  # passable, not listable, by dnsmasq's user
    finally:
        shutil.rmtree(parent, ignore_errors=True)


async def test_dnsmasq_files_move_to_run_when_the_state_dir_is_private(tmp_path):
    # pytest's tmp_path lies under a 0700 directory: dnsmasq's user cannot reach it
    confs = await _serve_and_check(tmp_path / "state")
    assert confs.parent == RUNTIME_CONFS
    assert not confs.exists()  # removed with the agent
