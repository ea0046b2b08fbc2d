"""cloud-init is the judge: Debian's cloud-init (its own OpenStack and ConfigDrive datasource code,
unmodified, run by Debian's python3) reads Nefos's metadata service and a config drive Nefos
built, and finds the server's instance id, hostname, public key, user data, metadata and network
configuration. scripts/install-test-deps.sh unpacks the package (block 7)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nefos.cmd.allinone import free_port
from nefos.clients import metadata as identification
from tests.metadata.conftest import META, USER_DATA, boot_described, mdcloud  # noqa: F401

CLOUD_INIT = Path(os.environ.get("NEFOS_CLOUD_INIT_DIR", "/opt/nefos-cloud-init")) / "usr/lib/python3/dist-packages"
READER = Path(__file__).with_name("cloud_init_reader.py")


async def _cloud_init(kind: str, where: str) -> dict:
    """Run in a thread: the cloud it reads serves from this test's event loop."""
    return await asyncio.to_thread(_run_cloud_init, kind, where)


def _run_cloud_init(kind: str, where: str) -> dict:
    assert (CLOUD_INIT / "cloudinit").is_dir(), f"no cloud-init in {CLOUD_INIT}: run scripts/install-test-deps.sh"
    done = subprocess.run(["/usr/bin/python3", str(READER), str(CLOUD_INIT), kind, where],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class _SigningProxy:
    """What the metadata proxy in a guest's network does for one guest: forwards its requests with
    the instance's signed identity (the proxy itself is tested in tests/network)."""

    def __init__(self, upstream: str, secret: str, server: dict):
        headers = {"X-Instance-ID": server["id"], "X-Tenant-ID": server["tenant_id"],
                   "X-Instance-ID-Signature": identification.sign(secret, server["id"])}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                request = urllib.request.Request(upstream + self.path, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, body = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, body = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _judge(seen: dict, server: dict, keypair: dict) -> None:
    assert seen["instance-id"] == server["id"]
    assert seen["local-hostname"].split(".")[0] == server["OS-EXT-SRV-ATTR:hostname"]
    assert seen["public-keys"] == [keypair["public_key"]]
    assert base64.b64decode(seen["userdata"]) == USER_DATA
    assert seen["meta"] == META
    links = [c for c in seen["network-config"]["config"] if c["type"] == "physical"]
    (address,) = [a["addr"] for addrs in server["addresses"].values() for a in addrs]
    assert [link["mac_address"] for link in links] == [
        a["OS-EXT-IPS-MAC:mac_addr"] for addrs in server["addresses"].values() for a in addrs]
    assert address in json.dumps(links[0]["subnets"])


async def test_cloud_init_reads_the_metadata_service(mdcloud):
    server, keypair = await boot_described(mdcloud, name="ci-md")
    proxy = _SigningProxy(str(mdcloud.proxy.client.base_url).rstrip("/"), mdcloud.proxy.secret, server)
    try:
        seen = await _cloud_init("openstack", proxy.url)
    finally:
        proxy.close()
    _judge(seen, server, keypair)
    assert seen["ec2-instance-id"].startswith("i-")


async def test_cloud_init_reads_a_config_drive_nefos_built(mdcloud, tmp_path):
    server, keypair = await boot_described(mdcloud, name="ci-cd", config_drive=True)
    iso = mdcloud.driver("host-1").config_drives[server["id"]]["path"]
    label = subprocess.run(["blkid", "-o", "value", "-s", "LABEL", iso], capture_output=True, text=True)
    assert label.stdout.strip() == "config-2"  # what cloud-init looks for
    # What a guest's kernel mounts, read by an ISO 9660 reader of its own (xorriso, with the Rock
    # Ridge names a guest sees); loop devices are not available everywhere the suite runs.
    drive = tmp_path / "config-2"
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/", str(drive)],
                   check=True, capture_output=True)
    seen = await _cloud_init("configdrive", str(drive))
    _judge(seen, server, keypair)


def test_the_judge_can_fail(tmp_path):
    """An empty drive is not taken for a config drive by cloud-init."""
    with pytest.raises(AssertionError):
        _run_cloud_init("configdrive", str(tmp_path))
