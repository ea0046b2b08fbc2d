"""A cloud with its metadata service, and a client that speaks to it as a metadata proxy does."""

from __future__ import annotations

import base64
import os
import stat

import httpx
import pytest

from nefos.clients import metadata as identification
from nefos.http_client import verified_tls
from tests.clouds import ADMIN, start_cloud, stop_cloud

USER_DATA = b"#cloud-config\nruncmd:\n - [echo, \xc3\xa9t\xc3\xa9]\n"
META = {"role": "web", "tier": "front"}
ADMIN_2_3 = {**ADMIN, "X-OpenStack-Nova-API-Version": "2.3"}


class Proxy:
    """Requests to the metadata service with the headers a metadata proxy adds."""

    def __init__(self, client: httpx.AsyncClient, secret: str):
        self.client = client
        self.secret = secret

    async def get(self, path: str, instance_id: str | None = None, tenant_id: str | None = None,
                  signature: str | None = None, **headers) -> httpx.Response:
        sent = dict(headers)
        if instance_id is not None:
            sent["X-Instance-ID"] = instance_id
            sent["X-Instance-ID-Signature"] = signature if signature is not None else \
                identification.sign(self.secret, instance_id)
        if tenant_id is not None:
            sent["X-Tenant-ID"] = tenant_id
        return await self.client.get(path, headers=sent)

    def sign_for(self, instance_id: str) -> str:
        return identification.sign(self.secret, instance_id)

    async def fetch(self, server: dict, path: str, expect: int = 200) -> httpx.Response:
        r = await self.get(path, server["id"], server["tenant_id"])
        assert r.status_code == expect, (path, r.status_code, r.text)
        return r


def read_secret(state_dir) -> str:
    path = state_dir / identification.SECRET_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    return path.read_text().strip()


@pytest.fixture
async def mdcloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1)
    harness.proxy = Proxy(httpx.AsyncClient(base_url=f"http://127.0.0.1:{harness.rt.cfg.metadata_listen_port}",
                                            timeout=30, verify=verified_tls()), read_secret(tmp_path))
    yield harness
    await harness.proxy.client.aclose()
    await stop_cloud(harness)


async def boot_described(cloud, name="md-vm", **extra) -> tuple[dict, dict]:
    """A server with a key pair, user data and metadata on a network; (its admin view at 2.3, key pair)."""
    r = await cloud.compute.post("/v2.1/os-keypairs", json={"keypair": {"name": f"{name}-key"}})
    assert r.status_code == 200, r.text
    keypair = r.json()["keypair"]
    net = await cloud.make_network(name=f"{name}-net", cidr="10.9.0.0/24")
    created = await cloud.boot(name=name, networks=[{"uuid": net["id"]}], key_name=keypair["name"],
                               user_data=base64.b64encode(USER_DATA).decode(), metadata=META, **extra)
    sid = created["server"]["id"]
    await cloud.wait_status(sid, "ACTIVE")
    return await cloud.server(sid, headers=ADMIN_2_3), keypair
