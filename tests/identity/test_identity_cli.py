"""The unmodified openstack CLI against the identity service served by uvicorn on a real port."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from identity_helpers import make_config

from nefos.cmd.allinone import Cloud
from nefos.control.identity.bootstrap import clouds_yaml
from nefos.control.identity.service import component
from tests.schema import open_runtime

OPENSTACK = Path(sys.executable).parent / "openstack"


@pytest.fixture
async def cloud(tmp_path):
    rt = await open_runtime(make_config(tmp_path))
    identity = component(rt)
    cloud = Cloud(rt, [identity])
    await cloud.start()
    try:
        yield cloud, identity
    finally:
        await cloud.stop()
        await rt.close()


@pytest.mark.cli
async def test_openstack_cli(cloud, tmp_path):
    c, identity = cloud
    assert OPENSTACK.exists(), f"{OPENSTACK} is missing: install python-openstackclient in the venv"
    clouds_file = tmp_path / "clouds.yaml"
    clouds_file.write_text(yaml.safe_dump(clouds_yaml(c.rt, identity.credentials)))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "OS_CLIENT_CONFIG_FILE": str(clouds_file)}

    async def osc(*args: str, cloud_name: str = "nefos-admin", fmt: bool = True):
        cmd = [str(OPENSTACK), "--os-cloud", cloud_name, *args]
        if fmt:
            cmd += ["-f", "json"]
        proc = await asyncio.create_subprocess_exec(*cmd, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}): {err.decode()}"
        return json.loads(out) if fmt and out.strip() else out.decode()

    creds = identity.credentials
    token = await osc("token", "issue")
    assert token["user_id"] == creds["admin"]["user_id"]
    assert token["project_id"] == creds["admin"]["project_id"]
    assert token["id"]

    catalog = await osc("catalog", "list")
    assert {entry["Type"] for entry in catalog} == {"identity", "compute", "network", "image"}

    project = await osc("project", "create", "--description", "from the CLI", "cli-project")
    assert project["name"] == "cli-project" and project["domain_id"] == "default"
    user = await osc("user", "create", "--password", "cli-secret", "--project", "cli-project", "cli-user")
    assert user["name"] == "cli-user"
    # Keystone's lockout exemption, as the CLI sets and clears it.
    await osc("user", "set", "--ignore-lockout-failure-attempts", "cli-user", fmt=False)
    assert (await osc("user", "show", "cli-user"))["options"] == {"ignore_lockout_failure_attempts": True}
    await osc("user", "set", "--no-ignore-lockout-failure-attempts", "cli-user", fmt=False)
    assert (await osc("user", "show", "cli-user"))["options"] == {"ignore_lockout_failure_attempts": False}
    await osc("role", "add", "--project", "cli-project", "--user", "cli-user", "member", fmt=False)
    assignments = await osc("role", "assignment", "list", "--project", "cli-project", "--names")
    assert [(a["Role"], a["User"]) for a in assignments] == [("member", "cli-user@Default")]
    names = {p["Name"] for p in await osc("project", "list")}
    assert {"admin", "demo", "service", "cli-project"} <= names

    # The new user can log in with the CLI and is scoped to its project.
    clouds = yaml.safe_load(clouds_file.read_text())
    clouds["clouds"]["cli"] = {**clouds["clouds"]["nefos"], "auth": {
        **clouds["clouds"]["nefos"]["auth"], "username": "cli-user", "password": "cli-secret",
        "project_name": "cli-project"}}
    clouds_file.write_text(yaml.safe_dump(clouds))
    token = await osc("token", "issue", cloud_name="cli")
    assert token["user_id"] == user["id"] and token["project_id"] == project["id"]

    # The demo user (a member) may not create users.
    proc = await asyncio.create_subprocess_exec(
        str(OPENSTACK), "--os-cloud", "nefos", "user", "create", "--password", "x", "mallory",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode != 0 and b"403" in err, err.decode()

    await osc("role", "remove", "--project", "cli-project", "--user", "cli-user", "member", fmt=False)
    await osc("user", "delete", "cli-user", fmt=False)
    await osc("project", "delete", "cli-project", fmt=False)
    names = {p["Name"] for p in await osc("project", "list")}
    assert "cli-project" not in names
