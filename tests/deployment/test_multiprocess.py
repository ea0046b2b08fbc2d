"""The boot flow with every service in its own process, over RabbitMQ, on PostgreSQL and on MariaDB."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from nefos.cmd.allinone import free_port
from nefos.control.image.bootstrap import DEFAULT_IMAGE_ID
from nefos.http_client import verified_tls
from tests.backends import fresh_database
from tests.noauth import ADMIN

BIN = Path(sys.executable).parent
RABBIT_URL = os.environ.get("NEFOS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

SERVICES = [["identity"], ["image"], ["network"], ["scheduler"], ["conductor"],
            ["compute", "--host", "mp-compute-1"], ["compute", "--host", "mp-compute-2"], ["api"]]


class Processes:
    def __init__(self, state: Path, env: dict):
        self.state, self.env = state, env
        self.procs: list[tuple[str, subprocess.Popen, object]] = []

    def start(self, args: list[str], *, env: dict | None = None, state: Path | None = None) -> None:
        """``env``: this process's whole environment (default: the cloud's); ``state``: its own state
        directory (default: the cloud's)."""
        name = "-".join(args)
        log = open(self.state / f"{name}.log", "w")
        env = dict(self.env if env is None else env)
        if args[0] == "compute":  # computes sharing a state directory each keep their own identity
            env["NEFOS_COMPUTE_ID_PATH"] = str((state or self.state) / f"compute_id.{args[2]}")
        proc = subprocess.Popen([str(BIN / "nefos"), *args, "--state-dir", str(state or self.state)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, proc, log))

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{(self.state / f'{name}.log').read_text()[-3000:]}"
                         for name, _p, _l in self.procs)

    def check_alive(self) -> None:
        dead = [name for name, p, _l in self.procs if p.poll() is not None]
        assert not dead, f"{dead} exited:\n{self.logs()}"

    @contextlib.contextmanager
    def held(self, service: str):
        """``service``'s processes stopped (SIGSTOP) meanwhile: what is sent to them waits on the bus,
        and reaches them at once when they go on."""
        held = [p for name, p, _l in self.procs if name.split("-")[0] == service]
        for proc in held:
            proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            for proc in held:
                proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for _name, proc, _log in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _name, proc, log in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


@contextlib.contextmanager
def running_cloud(backend: str, state: Path, services: list[list[str]] = SERVICES, *,
                  hypervisors: int | None = 2, database_url: str | None = None, **settings: str):
    """A cloud of ``services``, each its own process, on a fresh ``backend`` database and RabbitMQ
    (``settings``: more NEFOS_* variables for every process); ready when its APIs answer and
    ``hypervisors`` compute hosts (None: any number) reported their nodes; ``database_url``: an
    empty database of the caller's instead. Yields Compute and Networking API clients and the processes."""
    with (contextlib.nullcontext(database_url) if database_url else fresh_database(backend)) as db_url:
        ports = {name: free_port() for name in ("COMPUTE", "NETWORK", "IMAGE", "IDENTITY")}
        env = dict(os.environ, NEFOS_DATABASE_URL=db_url, NEFOS_BUS_URL=RABBIT_URL,
                   NEFOS_AUTH_STRATEGY="noauth", NEFOS_REPORT_INTERVAL="2",
                   # Bus topics are shared on the broker: keep host names unique per run.
                   NEFOS_HOST=f"mp-{uuid.uuid4().hex[:8]}",
                   NEFOS_CONTROL_EXCHANGE=f"nefos-test-{uuid.uuid4().hex[:8]}",
                   **{f"NEFOS_{name.upper()}": value for name, value in settings.items()})
        for name, port in ports.items():
            env[f"NEFOS_{name}_API_PORT"] = str(port)
        subprocess.run([str(BIN / "nefos"), "db", "upgrade", "--state-dir", str(state)], env=env,
                       check=True, capture_output=True, timeout=120)
        procs = Processes(state, env)
        try:
            for args in services:
                procs.start(args)
            compute = httpx.Client(verify=verified_tls(),
                                   base_url=f"http://127.0.0.1:{ports['COMPUTE']}", timeout=30, headers=ADMIN)
            network = httpx.Client(verify=verified_tls(),
                                   base_url=f"http://127.0.0.1:{ports['NETWORK']}", timeout=30, headers=ADMIN)
            # The image service registers the default image after it starts: a boot before that
            # is refused ("Can not find requested image").
            images = (httpx.Client(verify=verified_tls(),
                                   base_url=f"http://127.0.0.1:{ports['IMAGE']}", timeout=30, headers=ADMIN)
                      if ["image"] in services else None)
            deadline = time.monotonic() + 90
            while True:  # ready when the APIs answer, the computes reported their nodes, the image is there
                procs.check_alive()
                try:
                    r = compute.get("/v2.1/os-hypervisors")
                    if r.status_code == 200 and hypervisors in (None, len(r.json()["hypervisors"])):
                        network.get("/v2.0/networks").raise_for_status()
                        if images is None or _default_image_active(images):
                            break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"cloud did not come up:\n{procs.logs()}"
                time.sleep(0.5)
            if images is not None:
                images.close()
            yield compute, network, procs
            compute.close()
            network.close()
        finally:
            procs.stop()


def _default_image_active(images: httpx.Client) -> bool:
    r = images.get(f"/v2/images/{DEFAULT_IMAGE_ID}")
    return r.status_code == 200 and r.json()["status"] == "active"


SERVER_BACKENDS = [pytest.param("postgresql", marks=[pytest.mark.postgres, pytest.mark.rabbit]),
                   pytest.param("mysql", marks=[pytest.mark.mysql, pytest.mark.rabbit])]


@pytest.fixture(params=SERVER_BACKENDS)
def multiprocess_cloud(request, tmp_path):
    with running_cloud(request.param, tmp_path) as cloud:
        yield cloud


def _wait(compute, server_id, status, procs, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        r = compute.get(f"/v2.1/servers/{server_id}")
        if status is None and r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        server = r.json()["server"]
        if server["status"] == status and server["OS-EXT-STS:task_state"] is None:
            return server
        assert server["status"] != "ERROR" or status == "ERROR", server.get("fault")
        assert time.monotonic() < deadline, f"{server['status']} != {status}\n{procs.logs()}"
        time.sleep(0.2)


def test_boot_flow_each_service_its_own_process(multiprocess_cloud):
    compute, network, procs = multiprocess_cloud
    r = network.post("/v2.0/networks", json={"network": {"name": "mp-net"}})
    assert r.status_code == 201, r.text
    net_id = r.json()["network"]["id"]
    r = network.post("/v2.0/subnets", json={"subnet": {"network_id": net_id, "cidr": "10.9.0.0/24",
                                                       "ip_version": 4}})
    assert r.status_code == 201, r.text
    image_id = DEFAULT_IMAGE_ID
    ids = []
    for i in range(4):
        r = compute.post("/v2.1/servers", json={"server": {
            "name": f"mp-{i}", "imageRef": image_id, "flavorRef": "1", "networks": [{"uuid": net_id}]}})
        assert r.status_code == 202, r.text
        ids.append(r.json()["server"]["id"])
    servers = [_wait(compute, i, "ACTIVE", procs) for i in ids]
    assert {s["OS-EXT-SRV-ATTR:host"] for s in servers} == {"mp-compute-1", "mp-compute-2"}
    assert all(s["addresses"]["mp-net"][0]["addr"].startswith("10.9.0.") for s in servers)
    listed = compute.get("/v2.1/servers").json()["servers"]
    assert sorted(s["name"] for s in listed) == [f"mp-{i}" for i in range(4)]
    server_id = ids[0]
    for action, status in (({"os-stop": None}, "SHUTOFF"), ({"os-start": None}, "ACTIVE"),
                           ({"reboot": {"type": "SOFT"}}, "ACTIVE"), ({"reboot": {"type": "HARD"}}, "ACTIVE"),
                           ({"pause": None}, "PAUSED"), ({"unpause": None}, "ACTIVE")):
        r = compute.post(f"/v2.1/servers/{server_id}/action", json=action)
        assert r.status_code == 202, r.text
        _wait(compute, server_id, status, procs)
    for i in ids:
        assert compute.delete(f"/v2.1/servers/{i}").status_code == 204
    for i in ids:
        _wait(compute, i, None, procs)
    r = network.get("/v2.0/ports", params={"network_id": net_id, "device_owner": "compute:nova"})
    assert r.json()["ports"] == []
    # The scheduler process reads aggregates from the database: a zone made through the API
    # process steers the next boot at once.
    r = compute.post("/v2.1/os-aggregates", json={"aggregate": {"name": "mp-agg", "availability_zone": "mp-z"}})
    assert r.status_code == 200, r.text
    agg_id = r.json()["aggregate"]["id"]
    r = compute.post(f"/v2.1/os-aggregates/{agg_id}/action", json={"add_host": {"host": "mp-compute-2"}})
    assert r.status_code == 200, r.text
    r = compute.post("/v2.1/servers", json={"server": {
        "name": "mp-zoned", "imageRef": image_id, "flavorRef": "1", "networks": [{"uuid": net_id}],
        "availability_zone": "mp-z"}})
    assert r.status_code == 202, r.text
    zoned = _wait(compute, r.json()["server"]["id"], "ACTIVE", procs)
    assert zoned["OS-EXT-SRV-ATTR:host"] == "mp-compute-2" and zoned["OS-EXT-AZ:availability_zone"] == "mp-z"
    assert compute.delete(f"/v2.1/servers/{zoned['id']}").status_code == 204
    _wait(compute, zoned["id"], None, procs)
    r = compute.get("/v2.1/os-hypervisors/statistics")
    stats = r.json()["hypervisor_statistics"]
    assert stats["vcpus_used"] == 0 and stats["running_vms"] == 0
    procs.check_alive()
