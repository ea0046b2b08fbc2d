"""A request line longer than the server reads (8 KiB, eventlet.wsgi's limit, which Nova, Neutron and
Glance served with) is answered 414 URI Too Long in the listener's own error body, whether the line
arrives whole, in pieces or pipelined, and the client reads that answer before the connection
closes: never a reset, never a request served with a line of any length. A line at the limit is
served.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import pytest_asyncio

from nefos.cmd.allinone import free_port
from nefos.http_server import MAX_REQUEST_LINE
from nefos.http_client import verified_tls
from tests.noauth import ADMIN
from tests.clouds import start_cloud, stop_cloud

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Where each listener's first line points, and how its error body names the failure.
LISTENERS = {
    "compute": ("/v2.1/servers", lambda body: body["computeFault"]["code"] == 414),
    "network": ("/v2.0/networks", lambda body: body["NeutronError"]["type"] == "RequestURITooLong"),
    "image": ("/v2/images", lambda body: body["code"] == "414 Request-URI Too Long"),
    "identity": ("/v3/projects", lambda body: body["error"]["code"] == 414),
    "metadata": ("/openstack/latest/meta_data.json", None),
    "dashboard": ("/login", None),
    "console proxy": ("/vnc_lite.html", None),
    "metrics": ("/metrics", None),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    harness = await start_cloud(tmp_path_factory.mktemp("request-line"), fake_hosts=1, metrics_port=free_port())
    yield harness
    await stop_cloud(harness)


def port_of(cfg, listener: str) -> int:
    return {"compute": cfg.compute_api_port, "network": cfg.network_api_port, "image": cfg.image_api_port,
            "identity": cfg.identity_api_port, "metadata": cfg.metadata_listen_port,
            "dashboard": cfg.dashboard_port, "console proxy": cfg.novncproxy_port,
            "metrics": cfg.metrics_port}[listener]


def request_line(path: str, length: int) -> bytes:
    """``GET <path>?q=aaa... HTTP/1.1``, exactly ``length`` bytes long."""
    fixed = len(f"GET {path}?q= HTTP/1.1")
    return f"GET {path}?q={'a' * (length - fixed)} HTTP/1.1".encode()


async def exchange(port: int, line: bytes, pieces: int = 1, headers: bytes | None = None) -> tuple[int, dict, bytes]:
    """Send ``line`` and ``headers`` (by default Host and an admin's noauth headers) in ``pieces``
    writes, read the answer to the server's close: (status, headers, body)."""
    if headers is None:
        headers = b"Host: 127.0.0.1\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in ADMIN.items())
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = line + b"\r\n" + headers + b"Connection: close\r\n\r\n"
        size = -(-len(request) // pieces)
        for start in range(0, len(request), size):
            writer.write(request[start:start + size])
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)  # to EOF: the server closes after its answer
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("listener", list(LISTENERS))
@pytest.mark.parametrize("length", [MAX_REQUEST_LINE + 1, 20_000, 300_000, 4_000_000])
async def test_a_request_line_over_the_limit_is_answered_414(cloud, listener, length):
    path, names_it = LISTENERS[listener]
    status, headers, body = await exchange(port_of(cloud.rt.cfg, listener), request_line(path, length))
    assert status == 414, (status, body[:300])
    assert headers["connection"] == "close"
    assert headers["x-openstack-request-id"].startswith("req-")
    if names_it is not None:
        assert headers["content-type"] == "application/json"
        assert names_it(json.loads(body)), body


@pytest.mark.parametrize("pieces", [3, 40])
async def test_a_long_request_line_arriving_in_pieces_is_answered_414(cloud, pieces):
    status, _headers, body = await exchange(cloud.rt.cfg.compute_api_port,
                                            request_line("/v2.1/servers", 200_000), pieces=pieces)
    assert status == 414, body[:300]
    assert "computeFault" in json.loads(body)


async def test_a_long_request_line_pipelined_after_another_request_is_answered_414(cloud):
    headers = b"Host: 127.0.0.1\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in ADMIN.items())
    reader, writer = await asyncio.open_connection("127.0.0.1", cloud.rt.cfg.compute_api_port)
    try:
        writer.write(b"GET /v2.1/servers HTTP/1.1\r\n" + headers + b"\r\n"
                     + request_line("/v2.1/servers", 20_000) + b"\r\n" + headers + b"\r\n")
        await writer.drain()
        answers = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    first, second = answers.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 ") and second.startswith(b"414 "), answers[:500]


@pytest.mark.parametrize("listener", ["compute", "network", "image"])
async def test_a_request_line_at_the_limit_is_served(cloud, listener):
    path, _ = LISTENERS[listener]
    status, _headers, body = await exchange(port_of(cloud.rt.cfg, listener), request_line(path, MAX_REQUEST_LINE))
    assert status < 500 and status != 414, (status, body[:300])


async def test_an_http_client_reads_414_for_a_url_too_long(cloud):
    url = f"http://127.0.0.1:{cloud.rt.cfg.network_api_port}/v2.0/ports"
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        r = await client.get(url, params=[("id", f"{i:032x}") for i in range(300)], headers=ADMIN)
        assert r.status_code == 414
        assert r.json()["NeutronError"]["type"] == "RequestURITooLong"
        # The same filter in two halves, as python-neutronclient splits it, is served.
        for half in (range(150), range(150, 300)):
            r = await client.get(url, params=[("id", f"{i:032x}") for i in half], headers=ADMIN)
            assert r.status_code == 200, r.text
