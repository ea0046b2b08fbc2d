"""A new user's first session with the unmodified `openstack` CLI and the clouds.yaml `nefos up` wrote:
token issue, catalog list, project/user create, role add (as admin), then as the new member: network
and subnet create, port/image/flavor list, keypair create, server create --wait, list, stop/start,
delete --wait — and the new member sees nothing of the demo project's and cannot use admin commands."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.cli

OPENSTACK = Path(sys.executable).parent / "openstack"


def osc(cloud: dict, *args: str, name: str = "nefos", fmt: bool = True, check: bool = True):
    cmd = [str(OPENSTACK), "--os-cloud", name, *args] + (["-f", "json"] if fmt else [])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cloud["state"]), "OS_CLIENT_CONFIG_FILE": str(cloud["clouds_file"])}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    if not check:
        return r
    assert r.returncode == 0, f"openstack {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    # `--wait` writes the server's progress ("\rProgress: 25") to stdout ahead of the result whenever
    # a look finds the build between its steps.
    out = re.sub(r"\A(\s*Progress: \d+)*", "", r.stdout) if "--wait" in args else r.stdout
    return json.loads(out) if fmt and out.strip() else out


def test_openstack_cli_acceptance_flow(cloud):
    assert OPENSTACK.exists(), "python-openstackclient must be installed"
    token = osc(cloud, "token", "issue", name="nefos-admin")
    assert token["id"] and token["project_id"]
    assert {e["Type"] for e in osc(cloud, "catalog", "list", name="nefos-admin")} >= {
        "identity", "compute", "network", "image"}
    project = osc(cloud, "project", "create", "accept-project", name="nefos-admin")
    osc(cloud, "user", "create", "--password", "accept-secret", "--project", "accept-project", "accept-user",
        name="nefos-admin")
    osc(cloud, "role", "add", "--project", "accept-project", "--user", "accept-user", "member",
        name="nefos-admin", fmt=False)
    clouds = yaml.safe_load(cloud["clouds_file"].read_text())
    clouds["clouds"]["accept"] = {**clouds["clouds"]["nefos"], "auth": {
        **clouds["clouds"]["nefos"]["auth"], "username": "accept-user", "password": "accept-secret",
        "project_name": "accept-project"}}
    cloud["clouds_file"].write_text(yaml.safe_dump(clouds))

    me = osc(cloud, "token", "issue", name="accept")
    assert me["project_id"] == project["id"]
    demo_net = osc(cloud, "network", "create", "demo-only-net")  # the demo project's
    osc(cloud, "network", "create", "accept-net", name="accept")
    osc(cloud, "subnet", "create", "--network", "accept-net", "--subnet-range", "10.77.0.0/24", "accept-subnet",
        name="accept")
    nets = {n["Name"] for n in osc(cloud, "network", "list", name="accept")}
    assert "accept-net" in nets and "demo-only-net" not in nets
    assert osc(cloud, "network", "show", demo_net["id"], name="accept", fmt=False, check=False).returncode != 0
    assert osc(cloud, "port", "list", name="accept") == []
    assert "nefos-tiny" in {i["Name"] for i in osc(cloud, "image", "list", name="accept")}
    assert "m1.tiny" in {f["Name"] for f in osc(cloud, "flavor", "list", name="accept")}
    key = osc(cloud, "keypair", "create", "accept-key", name="accept", fmt=False)
    assert "PRIVATE KEY" in key
    server = osc(cloud, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--network", "accept-net",
                 "--key-name", "accept-key", "--wait", "accept-vm", name="accept")
    assert server["status"] == "ACTIVE" and "10.77.0." in json.dumps(server["addresses"])
    assert [s["Name"] for s in osc(cloud, "server", "list", name="accept")] == ["accept-vm"]
    assert "accept-vm" not in {s["Name"] for s in osc(cloud, "server", "list")}  # the demo project's view
    assert len(osc(cloud, "port", "list", name="accept")) == 1
    osc(cloud, "server", "stop", "accept-vm", name="accept", fmt=False)
    _wait_status(cloud, "accept-vm", "SHUTOFF")
    osc(cloud, "server", "start", "accept-vm", name="accept", fmt=False)
    _wait_status(cloud, "accept-vm", "ACTIVE")
    # Admin-only commands are refused to the member, in words the CLI shows.
    r = osc(cloud, "compute", "service", "list", name="accept", check=False)
    assert r.returncode != 0 and "os_compute_api:os-services:list" in r.stderr, r.stderr
    r = osc(cloud, "hypervisor", "list", name="accept", check=False)
    assert r.returncode != 0 and "403" in r.stderr, r.stderr
    r = osc(cloud, "flavor", "create", "--ram", "64", "--disk", "1", "--vcpus", "1", "mine", name="accept", check=False)
    assert r.returncode != 0 and "403" in r.stderr, r.stderr
    assert osc(cloud, "compute", "service", "list", name="nefos-admin")  # the admin may
    osc(cloud, "server", "delete", "--wait", "accept-vm", name="accept", fmt=False)
    assert osc(cloud, "server", "list", name="accept") == []
    assert osc(cloud, "port", "list", name="accept") == []
    osc(cloud, "subnet", "delete", "accept-subnet", name="accept", fmt=False)
    osc(cloud, "network", "delete", "accept-net", name="accept", fmt=False)
    osc(cloud, "network", "delete", "demo-only-net", fmt=False)


def _wait_status(cloud, name, status, timeout=60, cloud_name="accept"):
    deadline = time.monotonic() + timeout
    while True:
        shown = osc(cloud, "server", "show", name, name=cloud_name)
        if shown["status"] == status and not shown.get("OS-EXT-STS:task_state"):
            return shown
        assert time.monotonic() < deadline, f"{name} is {shown['status']}, not {status}"
        time.sleep(0.3)


def test_openstack_cli_usage_and_migrations(cloud):
    """`openstack server resize` then `server migration list`, `usage list` and `usage show`."""
    osc(cloud, "network", "create", "usage-net")
    osc(cloud, "subnet", "create", "--network", "usage-net", "--subnet-range", "10.78.0.0/24", "usage-subnet")
    server = osc(cloud, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny", "--network", "usage-net",
                 "--wait", "usage-vm")
    osc(cloud, "server", "resize", "--flavor", "m1.small", "--wait", "usage-vm", fmt=False)
    _wait_status(cloud, "usage-vm", "VERIFY_RESIZE", cloud_name="nefos")
    osc(cloud, "server", "resize", "confirm", "usage-vm", fmt=False)
    _wait_status(cloud, "usage-vm", "ACTIVE", cloud_name="nefos")
    migrations = osc(cloud, "server", "migration", "list", "--server", server["id"], name="nefos-admin")
    assert [(m["Status"], m["Type"]) for m in migrations] == [("confirmed", "resize")], migrations
    r = osc(cloud, "server", "migration", "list", check=False)
    assert r.returncode != 0 and "os_compute_api:os-migrations:index" in r.stderr, r.stderr
    usages = osc(cloud, "usage", "list", name="nefos-admin")
    # OSC asks with detailed=True, which Nova reads as not detailed ("1" only): no server count.
    project_id = osc(cloud, "token", "issue")["project_id"]
    demo = next(u for u in usages if u["Project"] in (project_id, "demo"))
    assert float(demo["RAM MB-Hours"]) > 0 and float(demo["CPU Hours"]) > 0, usages
    mine = osc(cloud, "usage", "show")
    servers = mine["Servers"]
    assert (len(servers) if isinstance(servers, list) else int(servers)) >= 1, mine
    assert float(mine["CPU Hours"]) > 0, mine
    osc(cloud, "server", "delete", "--wait", "usage-vm", fmt=False)
    osc(cloud, "subnet", "delete", "usage-subnet", fmt=False)
    osc(cloud, "network", "delete", "usage-net", fmt=False)
