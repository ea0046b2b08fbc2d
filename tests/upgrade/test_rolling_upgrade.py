"""A rolling upgrade: a compute host of the previous release under the current control plane, then
upgraded in place (docs/architecture.md, "Versioned messages and rolling upgrades").

The previous release is ``releases/nefos-0.9.0-py3-none-any.whl`` (built from ``main`` as it was
before RPC versioning, see ``releases/README.md``); it is installed into a virtualenv of its own,
made with ``--system-site-packages`` plus a ``.pth`` naming the shared virtualenv's packages, so
nothing is downloaded. The control plane is this tree's code (identity, image, network,
scheduler, conductor, api: one process each, over RabbitMQ and PostgreSQL). The 0.9.0 compute
host's messages carry no version: the control plane reads them as version 1.0 of each interface,
which is exactly what 0.9.0 sent; the control plane's messages to it are the 1.0 forms too.

The 0.9.0 compute host reads and writes the database itself (its own services row and
heartbeats included), so it gets the database's credentials (``NEFOS_DATABASE_URL``) as every
0.9.0 compute host had; the upgraded host reaches the database only through the conductor, which
writes its services row (with the version it serves) and heartbeats.

On the old host a server is booted, stopped, started and deleted; a second server is left
running, the host's process is stopped (SIGTERM) and this tree's compute is started with the same
host name, state directory, compute node identity and (fake) hypervisor state. The server is still
there, running, unchanged, and it can be stopped, started and deleted from the upgraded host;
the host's services row now reports the version it serves.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import httpx
import pytest

from nefos.cmd.allinone import free_port
from nefos.bus import interfaces
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.backends import fresh_database
from tests.deployment.test_multiprocess import _default_image_active
from tests.noauth import ADMIN

pytestmark = [pytest.mark.postgres, pytest.mark.rabbit]

RELEASE = Path(__file__).parent / "releases" / "nefos-0.9.0-py3-none-any.whl"
BIN = Path(sys.executable).parent  # this tree's nefos (PYTHONPATH names the tree's src)
RABBIT_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
CONTROL_PLANE = ["identity", "image", "network", "scheduler", "conductor", "api"]
HOST = f"upgrade-{uuid.uuid4().hex[:6]}"


def release_virtualenv(where: Path) -> Path:
    """A virtualenv with the previous release installed; its interpreter sees the shared
    virtualenv's packages (the dependencies) after its own (the old nefos)."""
    venv = where / "venv-0.9.0"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   capture_output=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "shared-nefos-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--quiet", str(RELEASE)],
                   check=True, capture_output=True, timeout=300, env=_without_this_tree(os.environ))
    return venv


def _without_this_tree(env) -> dict:
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


class Processes:
    def __init__(self, state: Path, env: dict):
        self.state, self.env = state, env
        self.procs: dict[str, tuple[subprocess.Popen, object]] = {}

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.state / f"{name}.log", "a")
        proc = subprocess.Popen([*argv, "--state-dir", str(self.state)], env=env or self.env,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = (proc, log)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{(self.state / f'{name}.log').read_text()[-3000:]}"
                         for name in self.procs)

    def check_alive(self) -> None:
        dead = [name for name, (p, _l) in self.procs.items() if p.poll() is not None]
        assert not dead, f"{dead} exited:\n{self.logs()}"

    def stop(self, name: str) -> int:
        proc, log = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log.close()
        return code

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)


def _until(what: str, check, procs: Processes, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        procs.check_alive()
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not in {timeout} s\n{procs.logs()}"
        time.sleep(0.3)


def _server(compute: httpx.Client, server_id: str) -> dict | None:
    r = compute.get(f"/v2.1/servers/{server_id}")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return r.json()["server"]


def _settled(compute, server_id, status, procs) -> dict:
    def check():
        server = _server(compute, server_id)
        assert server is not None, f"server {server_id} is gone"
        assert server["status"] != "ERROR", server.get("fault")
        return server if server["status"] == status and server["OS-EXT-STS:task_state"] is None else None
    return _until(f"{server_id} {status}", check, procs)


def _gone(compute, server_id, procs) -> None:
    _until(f"{server_id} deleted", lambda: _server(compute, server_id) is None, procs)


def _act(compute, server_id, action: dict) -> None:
    r = compute.post(f"/v2.1/servers/{server_id}/action", json=action)
    assert r.status_code == 202, r.text


def _boot(compute, name: str, net_id: str) -> str:
    r = compute.post("/v2.1/servers", json={"server": {
        "name": name, "imageRef": DEFAULT_IMAGE_ID, "flavorRef": "1", "networks": [{"uuid": net_id}]}})
    assert r.status_code == 202, r.text
    return r.json()["server"]["id"]


def _compute_service(compute) -> dict | None:
    r = compute.get("/v2.1/os-services", params={"binary": "nova-compute"})
    r.raise_for_status()
    found = [s for s in r.json()["services"] if s["host"] == HOST]
    return found[0] if found else None


def _service_versions(db_url: str) -> dict[str, str | None]:
    async def read():
        from sqlalchemy import select

        from nefos.db.models import Service
        from nefos.db.session import Database
        db = Database(db_url)
        try:
            async with db.reader() as s:
                rows = (await s.execute(select(Service.host, Service.binary, Service.version)
                                        .where(Service.deleted == 0))).all()
        finally:
            await db.dispose()
        return {f"{binary}@{host}": version for host, binary, version in rows}
    return asyncio.run(read())


@pytest.mark.parametrize("compute_pin", [None, "auto"], ids=["no-pin", "pin-auto"])
def test_a_0_9_compute_host_under_the_current_control_plane_then_upgraded_in_place(tmp_path, compute_pin):
    """``compute_pin``: the control plane's [upgrade_levels] compute (None: the default, no pin;
    ``auto``: the oldest running compute host's version, 1.0 while the 0.9.0 host runs)."""
    assert RELEASE.exists() and RELEASE.stat().st_size < 2_000_000
    venv = release_virtualenv(tmp_path)
    old_env_probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import nefos; print(nefos.__version__, nefos.__file__)"],
                                   capture_output=True, text=True, env=_without_this_tree(os.environ))
    assert old_env_probe.stdout.startswith("0.9.0 ") and str(venv) in old_env_probe.stdout, old_env_probe
    state = tmp_path / "state"
    state.mkdir()
    with fresh_database("postgresql") as db_url:
        ports = {name: free_port() for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
        env = dict(os.environ, NEFOS_DATABASE_URL=db_url, NEFOS_BUS_URL=RABBIT_URL,
                   NEFOS_AUTH_STRATEGY="noauth", NEFOS_REPORT_INTERVAL="2",
                   NEFOS_HOST=f"cp-{uuid.uuid4().hex[:8]}",
                   NEFOS_CONTROL_EXCHANGE=f"nefos-test-{uuid.uuid4().hex[:8]}",
                   **{f"NEFOS_{name}_API_PORT": str(port) for name, port in ports.items()})
        if compute_pin:
            env["NEFOS_UPGRADE_LEVELS_COMPUTE"] = compute_pin
        subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(state)], env=env,
                       check=True, capture_output=True, timeout=120)
        # One compute host, whichever release runs it: its name, node identity and hypervisor.
        host_env = dict(env, NEFOS_HOST=HOST, NEFOS_COMPUTE_ID_PATH=str(state / f"compute_id.{HOST}"),
                        NEFOS_FAKE_HYPERVISOR_DIR=str(state / "fake-hypervisor"))
        procs = Processes(state, env)
        compute = httpx.Client(verify=verified_tls(),
                               base_url=f"http://127.0.0.1:{ports['COMPUTE']}", timeout=30, headers=ADMIN)
        network = httpx.Client(verify=verified_tls(),
                               base_url=f"http://127.0.0.1:{ports['NETWORK']}", timeout=30, headers=ADMIN)
        images = httpx.Client(verify=verified_tls(),
                              base_url=f"http://127.0.0.1:{ports['IMAGE']}", timeout=30, headers=ADMIN)
        try:
            for service in CONTROL_PLANE:
                procs.start(service, [str(BIN / "nefos"), service])
            procs.start("compute-0.9.0", [str(venv / "bin" / "nefos"), "compute", "--host", HOST],
                        env=_without_this_tree(host_env))
            _until("the 0.9.0 host's node", lambda: compute.get("/v2.1/os-hypervisors").json().get("hypervisors"),
                   procs)
            assert _service_versions(db_url)[f"nova-compute@{HOST}"] is None  # 0.9.0 reports none

            _until("the network API", lambda: network.get("/v2.0/networks").status_code == 200, procs)
            r = network.post("/v2.0/networks", json={"network": {"name": "up-net"}})
            assert r.status_code == 201, r.text
            net_id = r.json()["network"]["id"]
            r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.21.0.0/24",
                                                               "ip_version": 4}})
            assert r.status_code == 201, r.text
            # The image service registers the default image after it starts listening; a boot
            # before that is refused with "Can not find requested image".
            _until("the default image active", lambda: _default_image_active(images), procs)

            # The old host under the new control plane: boot, stop, start, delete.
            first = _boot(compute, "on-0.9.0", net_id)
            assert _settled(compute, first, "ACTIVE", procs)["OS-EXT-SRV-ATTR:host"] == HOST
            _act(compute, first, {"os-stop": None})
            _settled(compute, first, "SHUTOFF", procs)
            _act(compute, first, {"os-start": None})
            _settled(compute, first, "ACTIVE", procs)
            if compute_pin == "auto":  # the conductor (build) and the API (stop, start) pinned themselves
                for service in ("conductor", "api"):
                    assert "compute RPC pinned to 1.0" in (state / f"{service}.log").read_text(), service
            assert compute.delete(f"/v2.1/servers/{first}").status_code == 204
            _gone(compute, first, procs)

            # A server left running on it while the host is upgraded in place.
            kept = _boot(compute, "kept", net_id)
            before = _settled(compute, kept, "ACTIVE", procs)
            assert before["OS-EXT-STS:power_state"] == 1
            assert procs.stop("compute-0.9.0") == 0
            procs.start("compute-current", [str(BIN / "nefos"), "compute", "--host", HOST], env=host_env)
            _until("the upgraded host reporting its version",
                   lambda: _service_versions(db_url)[f"nova-compute@{HOST}"] == interfaces.COMPUTE.version, procs)
            _until("the upgraded host up", lambda: (_compute_service(compute) or {}).get("state") == "up", procs)

            after = _settled(compute, kept, "ACTIVE", procs)
            for field in ("id", "name", "addresses", "flavor", "image", "OS-EXT-SRV-ATTR:host",
                          "OS-EXT-SRV-ATTR:hypervisor_hostname", "OS-EXT-STS:power_state", "created"):
                assert after[field] == before[field], field
            hypervisors = compute.get("/v2.1/os-hypervisors/detail").json()["hypervisors"]
            assert len(hypervisors) == 1 and hypervisors[0]["running_vms"] == 1  # the same node
            r = network.get("/v2.0/ports", params={"device_id": kept})
            assert [p["status"] for p in r.json()["ports"]] == ["ACTIVE"]

            # Manageable from the upgraded host.
            _act(compute, kept, {"os-stop": None})
            _settled(compute, kept, "SHUTOFF", procs)
            _act(compute, kept, {"os-start": None})
            assert _settled(compute, kept, "ACTIVE", procs)["OS-EXT-STS:power_state"] == 1
            assert compute.delete(f"/v2.1/servers/{kept}").status_code == 204
            _gone(compute, kept, procs)
            r = network.get("/v2.0/ports", params={"network_id": net_id, "device_owner": "compute:nova"})
            assert r.json()["ports"] == []
            stats = compute.get("/v2.1/os-hypervisors/statistics").json()["hypervisor_statistics"]
            assert stats["running_vms"] == 0 and stats["vcpus_used"] == 0
            procs.check_alive()
        finally:
            compute.close()
            network.close()
            images.close()
            procs.stop_all()
