"""Authentication never fails open: auth_strategy is a closed set, noauth is asked for explicitly,
serves loopback only unless the operator says otherwise, warns loudly, and makes nobody admin
unless the request says so (Nova's noauth2)."""

from __future__ import annotations

import logging
import subprocess
import sys

import httpx
import pytest

from nefos.cmd.allinone import Cloud, free_port
from nefos.control.compute.rest.app import create_app
from nefos.config import Config, ConfigError, check_serving, load_config
from nefos.http_client import verified_tls
from tests.schema import open_runtime


@pytest.mark.parametrize("value", ["Keystone", "keystone ", "noauth2", "none", "", "keystne"])
def test_an_unknown_auth_strategy_is_refused_with_the_option_named(value, tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_config(state_dir=tmp_path, auth_strategy=value)
    assert "auth_strategy" in str(exc.value) and "'keystone' or 'noauth'" in str(exc.value)


def test_an_unknown_auth_strategy_stops_the_command_with_a_clear_message(tmp_path):
    env = {"NEFOS_AUTH_STRATEGY": "keystne", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "nefos.cmd.cli", "db", "upgrade", "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, env={**_pythonpath(), **env})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "auth_strategy" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def _pythonpath() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")}


def test_keystone_is_the_default(tmp_path):
    assert Config().auth_strategy == "keystone"
    assert load_config(state_dir=tmp_path).auth_strategy == "keystone"


@pytest.mark.parametrize("bind_host", ["0.0.0.0", "::", "192.0.2.10", "nefos.example"])
def test_noauth_refuses_a_non_loopback_address(bind_host, tmp_path):
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth", bind_host=bind_host)
    with pytest.raises(ConfigError, match="loopback"):
        check_serving(cfg)
    check_serving(load_config(state_dir=tmp_path, auth_strategy="noauth", bind_host=bind_host,
                              noauth_allow_remote=True))
    check_serving(load_config(state_dir=tmp_path, bind_host=bind_host))  # keystone: anywhere


@pytest.mark.parametrize("bind_host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_noauth_serves_loopback(bind_host, tmp_path):
    check_serving(load_config(state_dir=tmp_path, auth_strategy="noauth", bind_host=bind_host))


async def test_a_noauth_cloud_on_a_wildcard_address_does_not_start(tmp_path):
    from nefos.control.compute.rest.service import component
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth", bind_host="0.0.0.0", compute_api_port=free_port())
    rt = await open_runtime(cfg)
    cloud = Cloud(rt, [component(rt)])
    try:
        with pytest.raises(ConfigError):
            await cloud.start()
        with pytest.raises(httpx.ConnectError):  # nothing listens
            httpx.get(f"http://127.0.0.1:{cfg.compute_api_port}/", timeout=2, verify=verified_tls())
    finally:
        await cloud.stop()
        await rt.close()


async def test_noauth_logs_a_loud_warning_when_it_serves(tmp_path, caplog):
    from nefos.control.compute.rest.service import component
    cfg = load_config(state_dir=tmp_path, auth_strategy="noauth", compute_api_port=free_port())
    rt = await open_runtime(cfg)
    cloud = Cloud(rt, [component(rt)])
    try:
        with caplog.at_level(logging.WARNING, logger="nefos.cmd.allinone"):
            await cloud.start()
        assert any("NO AUTHENTICATION" in r.getMessage() and r.levelno >= logging.WARNING for r in caplog.records)
    finally:
        await cloud.stop()
        await rt.close()


@pytest.fixture
async def noauth_api(tmp_path):
    rt = await open_runtime(load_config(state_dir=tmp_path, auth_strategy="noauth"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(rt, compute_api=None)),
                                 base_url="http://nefos") as client:
        yield client
    await rt.close()


async def test_noauth_without_identity_headers_is_not_admin(noauth_api):
    for path in ("/v2.1/os-services", "/v2.1/os-hypervisors", "/v2.1/servers", "/v2.1/flavors"):
        r = await noauth_api.get(path)
        assert r.status_code == 401, (path, r.status_code)
        assert "computeFault" in r.json() or "unauthorized" in r.json()
    assert (await noauth_api.get("/")).status_code == 200  # version documents stay public


async def test_noauth_makes_a_caller_admin_only_when_the_request_says_so(noauth_api):
    member = {"X-Project-Id": "a" * 32, "X-User-Id": "b" * 32}
    assert (await noauth_api.get("/v2.1/os-services", headers=member)).status_code == 403
    assert (await noauth_api.get("/v2.1/os-services", headers={**member, "X-Roles": "member,reader"})).status_code == 403
    assert (await noauth_api.get("/v2.1/os-services", headers={**member, "X-Roles": "admin"})).status_code == 200
    # A placeholder token (keystoneauth's NoAuth sends one) changes nothing either way.
    r = await noauth_api.get("/v2.1/os-services", headers={**member, "X-Auth-Token": "notused"})
    assert r.status_code == 403
