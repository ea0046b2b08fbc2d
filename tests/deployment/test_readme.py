"""The README followed literally, as a new user on a fresh machine would: its start command in one
login shell, then its client commands, exactly as written, in another new login shell (no
virtualenv activated, nothing on the PATH the README does not put there). With the shipped
defaults: the state in ./.nefos, the default ports, libvirt and the tiny guest. (Its "Reach your
guest" block, the third, is what tests/libvirt/test_usable_guest.py does.)"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
STARTED = "openstack --os-cloud nefos server list"  # the last line `nefos up` prints once up


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def _login_shell(script: str) -> list[str]:
    """``script`` in a new login shell with nothing inherited but HOME: what a user gets from a
    fresh login (the PATH comes from the system's profile)."""
    env = {"HOME": os.environ.get("HOME", "/root"), "TERM": "dumb", "LANG": "C.UTF-8"}
    return ["env", "-i", *[f"{k}={v}" for k, v in env.items()], "bash", "-l", "-e", "-c",
            f"cd {REPO} && {script}"]


DELETE_VM1 = _login_shell("export OS_CLIENT_CONFIG_FILE=$PWD/.nefos/clouds.yaml && "
                          "openstack --os-cloud nefos server delete --wait vm1")


@pytest.fixture
def moved_aside_state():
    """The README's state directory is ./.nefos; a developer's own is kept safe and put back."""
    state, kept = REPO / ".nefos", REPO / ".nefos.kept-by-test-readme"
    if state.exists():
        state.rename(kept)
    yield state
    shutil.rmtree(state, ignore_errors=True)
    if kept.exists():
        kept.rename(state)


def test_the_readme_s_commands_work_as_written(moved_aside_state):
    blocks = _shell_blocks(README.read_text())
    start, use = blocks[0].strip(), blocks[1].strip()
    assert start == "bash scripts/up.sh", start
    assert "openstack --os-cloud nefos server create" in use, use
    log_path = moved_aside_state.parent / ".nefos-readme-test.log"
    with open(log_path, "w") as log:
        cloud = subprocess.Popen(_login_shell(start), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # a first start installs libvirt and builds the tiny guest
        while STARTED not in log_path.read_text():
            assert cloud.poll() is None, "the README's start command ended:\n" + log_path.read_text()
            assert time.monotonic() < deadline, "the cloud did not come up:\n" + log_path.read_text()
            time.sleep(0.5)
        assert "compute driver: libvirt" in log_path.read_text(), log_path.read_text()
        result = subprocess.run(_login_shell(use), capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"the README's commands failed:\n{result.stdout}\n{result.stderr}"
        listed = [line for line in result.stdout.splitlines() if "vm1" in line and line.startswith("|")]
        assert listed and "ACTIVE" in listed[-1], result.stdout  # the table of `server list`
        # `nefos events --since 0`: the boot as it happened.
        assert re.search(r"server\.updated +\S+ ACTIVE task=None", result.stdout), result.stdout
        deleted = subprocess.run(DELETE_VM1, capture_output=True, text=True, timeout=300)
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    finally:
        if cloud.poll() is None:
            subprocess.run(DELETE_VM1, capture_output=True, timeout=300)  # no guest left behind
            os.killpg(cloud.pid, signal.SIGTERM)
            try:
                cloud.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(cloud.pid, signal.SIGKILL)
                cloud.wait()
        log_path.unlink(missing_ok=True)
    assert cloud.returncode == 0 or cloud.returncode == -signal.SIGTERM, cloud.returncode
