"""An inbound global request id (``X-OpenStack-Request-ID``) is taken only in oslo.middleware's
form, ``req-`` and a lowercase UUID; anything else a client sends is ignored on every API: not
logged, not carried to other services, not echoed. Each request still gets its own request id.
"""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest
import pytest_asyncio

from tests.noauth import ADMIN
from tests.clouds import start_cloud, stop_cloud
from nefos.http_client import verified_tls

FORGED = [
    "req-not-a-uuid",
    f"req-{uuid.uuid4()}".upper(),
    f"req-{str(uuid.uuid4()).upper()}",
    f"req-{uuid.uuid4()} status: 200 forged access line",
    f"req-{uuid.uuid4()}0",
    f"{uuid.uuid4()}",
    "req-" + "a" * 4000,
]


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    harness = await start_cloud(tmp_path_factory.mktemp("request-ids"), fake_hosts=1)
    yield harness
    await stop_cloud(harness)


def api_urls(cfg) -> dict[str, str]:
    return {"compute": f"http://127.0.0.1:{cfg.compute_api_port}/v2.1/servers",
            "network": f"http://127.0.0.1:{cfg.network_api_port}/v2.0/networks",
            "image": f"http://127.0.0.1:{cfg.image_api_port}/v2/images",
            "identity": f"http://127.0.0.1:{cfg.identity_api_port}/v3/projects"}


def access_line(caplog, request_id: str) -> logging.LogRecord:
    [record] = [r for r in caplog.records if r.name == "nefos.access" and getattr(r, "request_id", None) == request_id]
    return record


@pytest.mark.parametrize("api", ["compute", "network", "image", "identity"])
async def test_a_global_request_id_in_another_form_is_ignored(cloud, caplog, api):
    caplog.set_level(logging.INFO, logger="nefos.access")
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        for forged in FORGED:
            r = await client.get(api_urls(cloud.rt.cfg)[api], headers={**ADMIN, "X-OpenStack-Request-ID": forged})
            assert r.status_code < 500, r.text
            own = r.headers["x-openstack-request-id"]
            assert own != forged and own.startswith("req-")
            assert forged not in r.headers.values()
            record = access_line(caplog, own)
            assert getattr(record, "global_request_id", None) in (None, "-"), (forged, record.__dict__)
            assert forged not in record.getMessage()
            assert not [value for value in vars(record).values() if value == forged]


async def test_a_global_request_id_in_oslo_form_is_taken(cloud, caplog):
    caplog.set_level(logging.INFO, logger="nefos.access")
    global_id = f"req-{uuid.uuid4()}"
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        r = await client.get(api_urls(cloud.rt.cfg)["compute"], headers={**ADMIN, "X-OpenStack-Request-ID": global_id})
    assert r.status_code == 200
    assert r.headers["x-openstack-request-id"] != global_id
    assert access_line(caplog, r.headers["x-openstack-request-id"]).global_request_id == global_id


async def test_an_unauthenticated_request_with_a_forged_global_request_id_logs_none(cloud, caplog):
    caplog.set_level(logging.INFO, logger="nefos.access")
    forged = f"req-{uuid.uuid4()} forged"
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        r = await client.get(api_urls(cloud.rt.cfg)["compute"], headers={"X-OpenStack-Request-ID": forged})
    assert r.status_code == 401
    assert getattr(access_line(caplog, r.headers["x-openstack-request-id"]), "global_request_id", None) in (None, "-")
