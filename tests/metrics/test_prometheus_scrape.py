"""The real Prometheus server (Debian's package) scrapes a cloud's /metrics, as docs/operations.md
configures it: after a boot, the build-step and API latency histograms have its samples."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from nefos.cmd.allinone import free_port
from nefos.http_client import verified_tls
from tests.compute.conftest import boot_active
from tests.metrics.test_metrics import scrape, total
from tests.clouds import start_cloud, stop_cloud

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
STEP = 'nefos_instance_step_duration_seconds_count{step="compute_spawn",result="Success"}'
CREATE = 'nefos_api_request_duration_seconds_count{service="compute",method="POST",route="/v2.1/servers"}'


def _unprivileged(path) -> list[str]:
    """Run Prometheus as its package's own user when the tests run as root, owning ``path``."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam("prometheus")
    except KeyError:
        user = pwd.getpwnam("nobody")
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", user.pw_name, "--"]


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, metrics_port=free_port())
    yield harness
    await stop_cloud(harness)


@pytest.fixture
def prometheus(cloud, tmp_path):
    """A Prometheus server scraping the cloud's operator listener every second; its HTTP API's URL."""
    if not os.path.exists(PROMETHEUS):
        pytest.fail("Prometheus is not installed: scripts/install-test-deps.sh installs Debian's package")
    # Outside pytest's own directory, which only root may enter.
    home = Path(tempfile.mkdtemp(prefix="nefos-prometheus-"))
    (home / "data").mkdir()
    config = home / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: nefos\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{cloud.rt.cfg.metrics_port}']\n")
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([*_unprivileged(home), PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={home / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


async def _query(client: httpx.AsyncClient, url: str, expr: str) -> float | None:
    """The value of ``expr`` in Prometheus now (None: no sample, or Prometheus not answering yet)."""
    try:
        r = await client.get(f"{url}/api/v1/query", params={"query": expr})
    except httpx.TransportError:
        return None
    if r.status_code != 200:
        return None
    result = r.json()["data"]["result"]
    return sum(float(series["value"][1]) for series in result) if result else None


async def test_prometheus_sees_a_boot_in_the_histograms(cloud, prometheus, tmp_path):
    url, proc = prometheus
    before = await scrape(cloud.rt.cfg.metrics_port)
    steps_before = total(before, "nefos_instance_step_duration_seconds_count", step="compute_spawn",
                         result="Success")
    creates_before = total(before, "nefos_api_request_duration_seconds_count", service="compute",
                           method="POST", route="/v2.1/servers")
    await boot_active(cloud)
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(verify=verified_tls(), timeout=10) as client:
        while True:
            up = await _query(client, url, 'up{job="nefos"}')
            steps = await _query(client, url, STEP)
            creates = await _query(client, url, CREATE)
            if up == 1 and steps is not None and steps > steps_before and \
                    creates is not None and creates > creates_before:
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                log = (tmp_path / "prometheus.log").read_text()[-3000:]
                raise AssertionError(f"Prometheus saw up={up}, {STEP}={steps} (before: {steps_before}), "
                                     f"{CREATE}={creates} (before: {creates_before}); its log:\n{log}")
            await asyncio.sleep(0.5)
        # The histograms are whole: their buckets answer a quantile.
        quantile = await _query(client, url,
                                'histogram_quantile(0.5, sum by (le) (nefos_instance_step_duration_seconds_bucket))')
        assert quantile is not None and quantile >= 0
