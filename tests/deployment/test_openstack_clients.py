"""The acceptance flow through unmodified clients: the README's start command (`scripts/up.sh`,
which runs `nefos up`) as a real process, then the `openstack` CLI and openstacksdk with the
clouds.yaml it wrote, found through the `export OS_CLIENT_CONFIG_FILE=...` line it printed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nefos.cmd.allinone import free_port

pytestmark = pytest.mark.cli

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def start_up(state: Path, env: dict, log) -> subprocess.Popen:
    """`bash scripts/up.sh` as the README says, with the fake driver (no libvirt set-up) and this venv."""
    return subprocess.Popen(["bash", str(REPO / "scripts" / "up.sh"), "--state-dir", str(state), "--fake-hosts", "2",
                             "--driver", "fake"], env=dict(env, NEFOS_VENV=str(BIN.parent)), stdout=log,
                            stderr=subprocess.STDOUT)


def _openstack() -> str:
    exe = BIN / "openstack"
    assert exe.exists(), "python-openstackclient must be installed (the test extra installs it)"
    return str(exe)


@pytest.fixture(scope="module")
def nefos_up(tmp_path_factory):
    # A state directory as long as operators' can be: the printed export line must stay one line.
    state = tmp_path_factory.mktemp("nefos-up") / "a-state-directory-as-long-as-an-operators-could-choose"
    state.mkdir()
    env = dict(os.environ)
    ports = {name: free_port() for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
    for name, port in ports.items():
        env[f"NEFOS_{name}_API_PORT"] = str(port)
    env["NEFOS_METADATA_LISTEN_PORT"] = str(free_port())  # module fixtures start before tests/conftest's
    env["NEFOS_NOVNCPROXY_PORT"] = str(free_port())
    env["NEFOS_DASHBOARD_PORT"] = str(free_port())
    env.pop("OS_CLOUD", None)
    log = open(state / "nefos-up.log", "w")
    proc = start_up(state, env, log)
    clouds = state / "clouds.yaml"
    deadline = time.monotonic() + 60
    while "openstack --os-cloud nefos server list" not in (state / "nefos-up.log").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("nefos up did not start:\n" + (state / "nefos-up.log").read_text())
        time.sleep(0.2)
    # What it printed says where the clouds.yaml is, in a line one can paste.
    exports = [line for line in (state / "nefos-up.log").read_text().splitlines() if "OS_CLIENT_CONFIG_FILE" in line]
    assert exports == [f"export OS_CLIENT_CONFIG_FILE={clouds}"], exports
    assert clouds.exists()
    cloud = {"state": state, "clouds": clouds, "proc": proc, "env": env}
    yield cloud
    proc = cloud["proc"]  # the cloud running now: a test may have restarted it
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 0, (state / "nefos-up.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def run_openstack(nefos_up, *args, cloud="nefos", check=True) -> subprocess.CompletedProcess:
    env = dict(nefos_up["env"], OS_CLIENT_CONFIG_FILE=str(nefos_up["clouds"]))
    result = subprocess.run([_openstack(), "--os-cloud", cloud, *args], env=env, capture_output=True,
                            text=True, timeout=180)
    if check:
        assert result.returncode == 0, f"openstack {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def run_json(nefos_up, *args, cloud="nefos"):
    return json.loads(run_openstack(nefos_up, *args, "-f", "json", cloud=cloud).stdout)


def test_openstack_cli_boot_flow(nefos_up):
    run_openstack(nefos_up, "network", "create", "cli-net")
    run_openstack(nefos_up, "subnet", "create", "--network", "cli-net", "--subnet-range", "10.20.0.0/24",
                  "cli-subnet")
    server = run_json(nefos_up, "server", "create", "--image", "nefos-tiny", "--flavor", "m1.tiny",
                      "--network", "cli-net", "--wait", "cli-vm")
    assert server["status"] == "ACTIVE"
    assert "10.20.0." in json.dumps(server["addresses"])
    listed = run_json(nefos_up, "server", "list")
    assert [s["Name"] for s in listed] == ["cli-vm"]
    shown = run_json(nefos_up, "server", "show", "cli-vm")
    assert shown["status"] == "ACTIVE" and shown["id"] == server["id"]

    run_openstack(nefos_up, "server", "stop", "cli-vm")
    _wait_cli_status(nefos_up, "cli-vm", "SHUTOFF")
    run_openstack(nefos_up, "server", "start", "cli-vm")
    _wait_cli_status(nefos_up, "cli-vm", "ACTIVE")
    run_openstack(nefos_up, "server", "reboot", "--wait", "cli-vm")
    _wait_cli_status(nefos_up, "cli-vm", "ACTIVE")
    run_openstack(nefos_up, "server", "delete", "--wait", "cli-vm")
    assert run_json(nefos_up, "server", "list") == []
    ports = run_json(nefos_up, "port", "list", "--device-owner", "compute:nova")
    assert ports == []


def _wait_cli_status(nefos_up, name, status, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        shown = run_json(nefos_up, "server", "show", name)
        if shown["status"] == status and not shown.get("OS-EXT-STS:task_state"):
            return shown
        assert time.monotonic() < deadline, f"{name} is {shown['status']}, not {status}"
        time.sleep(0.3)


def test_openstacksdk_boot_flow(nefos_up):
    from openstack.config import OpenStackConfig
    from openstack.connection import Connection

    region = OpenStackConfig(config_files=[str(nefos_up["clouds"])]).get_one(cloud="nefos")
    conn = Connection(config=region)
    net = conn.network.create_network(name="sdk-net")
    conn.network.create_subnet(network_id=net.id, cidr="10.30.0.0/24", ip_version=4, name="sdk-subnet")
    image = conn.image.find_image("nefos-tiny")
    flavor = conn.compute.find_flavor("m1.tiny")
    server = conn.compute.create_server(name="sdk-vm", image_id=image.id, flavor_id=flavor.id,
                                        networks=[{"uuid": net.id}])
    server = conn.compute.wait_for_server(server, status="ACTIVE", wait=60)
    assert server.addresses["sdk-net"][0]["addr"].startswith("10.30.0.")
    conn.compute.stop_server(server)
    conn.compute.wait_for_server(server, status="SHUTOFF", wait=60)
    conn.compute.start_server(server)
    conn.compute.wait_for_server(server, status="ACTIVE", wait=60)
    conn.compute.reboot_server(server, "HARD")
    conn.compute.wait_for_server(server, status="ACTIVE", wait=60)
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=60)
    assert list(conn.network.ports(device_id=server.id)) == []
    conn.close()


def test_restart_keeps_every_record(nefos_up, tmp_path):
    """Stopping `nefos up` and starting it again on the same state dir resumes with records intact."""
    run_openstack(nefos_up, "network", "create", "persist-net")
    before = run_json(nefos_up, "network", "show", "persist-net")
    proc = nefos_up["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    log = open(nefos_up["state"] / "nefos-up-2.log", "w")
    proc2 = start_up(nefos_up["state"], nefos_up["env"], log)
    nefos_up["proc"] = proc2
    deadline = time.monotonic() + 60
    while True:
        result = run_openstack(nefos_up, "network", "show", "persist-net", "-f", "json", check=False)
        if result.returncode == 0:
            break
        assert proc2.poll() is None and time.monotonic() < deadline, (nefos_up["state"] / "nefos-up-2.log").read_text()
        time.sleep(0.3)
    assert json.loads(result.stdout)["id"] == before["id"]
