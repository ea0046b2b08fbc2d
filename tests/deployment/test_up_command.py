"""`nefos up`'s options mean what they say: ``--fake-hosts N`` starts N fake compute hosts, and only
those, even where libvirt is usable, and cannot be combined with another driver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nefos.cmd.allinone import all_in_one_components, free_port
from nefos.config import ConfigError, load_config
from nefos.service import Runtime


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME", "PATH")}
    for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY"):
        env[f"NEFOS_{name}_API_PORT"] = str(free_port())
    env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())
    env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
    env["NEFOS_DASHBOARD_PORT"] = str(free_port())
    return env


def start_up(tmp_path, *args: str, env: dict | None = None, launcher: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path]:
    """``nefos up *args`` on a state directory of its own (started through ``launcher``, e.g.
    ``prlimit``, which runs it in its own place), once it says it is ready: the process and its log
    (a start that fails or takes over 120 s is stopped and fails the test)."""
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*launcher, sys.executable, "-m", "nefos.cmd.cli", "up", *args,
                                 "--state-dir", str(tmp_path / "state")],
                                env=env or _env(), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while "openstack --os-cloud nefos server list" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(log.read_text())
        time.sleep(0.2)
    return proc, log


def test_fake_hosts_starts_that_many_fake_hosts_with_libvirt_usable(tmp_path):
    assert subprocess.run(["virsh", "-c", "qemu:///system", "version"], capture_output=True).returncode == 0, \
        "libvirt must answer here, or this test proves nothing"
    proc, log = start_up(tmp_path, "--fake-hosts", "3")
    try:
        text = log.read_text()
        assert "compute driver: fake (--fake-hosts 3)" in text and "3 fake compute host(s)" in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()


def test_fake_hosts_with_another_driver_is_refused(tmp_path):
    for argv in (["--fake-hosts", "2", "--driver", "libvirt"], ["--fake-hosts", "0"]):
        proc = subprocess.run([sys.executable, "-m", "nefos.cmd.cli", "up", *argv, "--state-dir", str(tmp_path)],
                              env=_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "--fake-hosts" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr, proc.stdout



async def test_enabled_apis_leaves_the_metadata_service_out(tmp_path):
    """Nova's ``enabled_apis``: without ``metadata`` the all-in-one serves no metadata service (guests
    then learn who they are from config drives only); an unknown API name is refused."""
    assert load_config(state_dir=tmp_path).enabled_apis == ["osapi_compute", "metadata"]
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth", enabled_apis="osapi_compute, ")
    assert cfg.enabled_apis == ["osapi_compute"]
    rt = await Runtime.open(cfg, migrate=True)
    try:
        names = [c.name for c in all_in_one_components(rt)]
        assert "metadata-api" not in names and names[-1] == "compute-api", names
        rt.cfg.enabled_apis = "osapi_compute,metadata"
        assert "metadata-api" in [c.name for c in all_in_one_components(rt)]
    finally:
        await rt.close()
    with pytest.raises(ConfigError, match="enabled_apis: .*unknown API ec2"):
        load_config(state_dir=tmp_path, enabled_apis="osapi_compute,ec2")


def test_up_shows_its_slow_steps_as_they_end(tmp_path):
    """A new user sees each slow start-up step end, in order, with how long it took (a spinner runs
    meanwhile on a terminal): the hypervisor probe, the start, the external network, the guest image."""
    import re
    import shutil
    import tempfile
    # QEMU (libvirt's user) must pass through to the state directory's instances: not pytest's
    # private directory.
    home = Path(tempfile.mkdtemp(prefix="nefos-up-progress-"))
    home.chmod(0o711)
    proc, log = start_up(home)
    try:
        text = log.read_text()
        steps = ["Probing the hypervisor (libvirt, KVM)", "Starting Nefos (migrating the database, starting services)",
                 "Setting up the external network public on br-ex-nefos", "Building or reusing the tiny guest image"]
        where = []
        for step in steps:
            found = re.search("✓ " + re.escape(step) + r" \(\d+\.\d s\)$", text, re.M)
            assert found, f"no line saying {step!r} ended:\n{text}"
            where.append(found.start())
        assert where == sorted(where), text
        assert text.index(steps[-1]) < text.index("Nefos is up."), text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=60) == 0, log.read_text()
        finally:
            shutil.rmtree(home, ignore_errors=True)
