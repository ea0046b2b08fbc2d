"""The secret the metadata proxies sign with, when ``metadata_proxy_shared_secret`` is empty:
``<state_dir>/metadata_proxy_shared_secret``, generated with mode 0600, tightened to 0600 when it
exists wider, and refused at start (by the metadata service and by the DHCP agent's proxies) when
empty, since a signature keyed with nothing is one anybody can make.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from nefos.config import ConfigError, load_config
from nefos.clients import metadata as identification
from nefos.control.metadata.service import component as metadata_component
from nefos.agents.dhcp_agent import DhcpAgent
from tests.deployment.test_up_command import _env
from tests.schema import open_runtime


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
async def rt(tmp_path):
    runtime = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="noauth"))
    yield runtime
    await runtime.close()


def test_nefos_up_refuses_to_start_on_an_empty_secret_file_and_says_why(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    secret = state / identification.SECRET_FILE
    secret.write_text("\n")
    proc = subprocess.run([sys.executable, "-m", "nefos.cmd.cli", "up", "--fake-hosts", "1", "--state-dir", str(state)],
                          env=_env(), capture_output=True, text=True, timeout=180)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said
    assert f"{secret} is empty" in " ".join(said.split()), said
    assert "Traceback" not in said
    assert secret.read_text() == "\n"  # nothing written over it


@pytest.mark.parametrize("content", ["", "\n", "  \t\n"])
async def test_the_metadata_service_and_the_dhcp_agent_refuse_an_empty_secret_file(rt, tmp_path, content):
    secret = tmp_path / identification.SECRET_FILE
    secret.write_text(content)
    with pytest.raises(ConfigError, match="is empty"):
        metadata_component(rt)
    with pytest.raises(ConfigError, match="is empty"):
        DhcpAgent(rt, "dhcp-secret-test")


async def test_without_isolated_metadata_the_dhcp_agent_does_not_read_the_secret(rt, tmp_path):
    rt.cfg.enable_isolated_metadata = False
    secret = tmp_path / identification.SECRET_FILE
    secret.write_text("")
    agent = DhcpAgent(rt, "dhcp-secret-test")  # not refused: no proxy, no secret needed
    assert agent.metadata_proxies is None
    assert secret.read_text() == ""  # neither read as a key nor written over


async def test_a_generated_secret_file_is_0600_and_the_agent_reads_the_same_secret(rt, tmp_path):
    secret = tmp_path / identification.SECRET_FILE
    old_umask = os.umask(0)  # the mode is the file's own, whatever the process's umask
    try:
        app = metadata_component(rt).app
    finally:
        os.umask(old_umask)
    assert mode(secret) == 0o600
    text = secret.read_text()
    assert len(text.strip()) == 64 and int(text, 16) and app.state.secret == text.strip()
    assert DhcpAgent(rt, "dhcp-secret-test").metadata_proxies.secret == text.strip()


@pytest.mark.parametrize("wide", [0o644, 0o640, 0o666, 0o604])
async def test_an_existing_secret_file_others_may_read_is_tightened_to_0600_and_used(rt, tmp_path, wide):
    secret = tmp_path / identification.SECRET_FILE
    secret.write_text("an operator's secret\n")
    secret.chmod(wide)
    assert metadata_component(rt).app.state.secret == "an operator's secret"
    assert mode(secret) == 0o600
    secret.chmod(wide)
    assert DhcpAgent(rt, "dhcp-secret-test").metadata_proxies.secret == "an operator's secret"
    assert mode(secret) == 0o600


async def test_a_configured_secret_needs_no_file(rt, tmp_path):
    rt.cfg.metadata_proxy_shared_secret = "configured"
    assert metadata_component(rt).app.state.secret == "configured"
    assert DhcpAgent(rt, "dhcp-secret-test").metadata_proxies.secret == "configured"
    assert not (tmp_path / identification.SECRET_FILE).exists()
