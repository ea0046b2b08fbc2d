"""A request the HTTP server cannot parse (a malformed request line or header) is answered 400, and
one whose head (line and headers) is over the 16 KiB the server holds is answered 431, whether it
arrives whole or in pieces, in the listener's own error body; the client reads that answer before
the connection closes: never a reset, never a head of any size served.
"""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from nefos.http_server import MAX_REQUEST_HEAD
from tests.api.test_request_line_limit import exchange
from tests.clouds import start_cloud, stop_cloud

pytestmark = pytest.mark.asyncio(loop_scope="module")

# How each API's error body names the status.
NAMES_IT = {
    "compute": lambda body, status: body[{400: "badRequest"}.get(status, "computeFault")]["code"] == status,
    "network": lambda body, status: body["NeutronError"]["type"] == {
        400: "HTTPBadRequest", 431: "RequestHeaderFieldsTooLarge"}[status],
    "image": lambda body, status: body["code"].startswith(f"{status} "),
    "identity": lambda body, status: body["error"]["code"] == status,
}

# Each: the request head's first line and its headers, as sent, and the status it gets.
MALFORMED = {
    "headers-20k": (b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"p" * 20_000 + b"\r\n", 431),
    "headers-4m": (b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-Pad-%d: %s\r\n" % (i, b"p" * 4000) for i in range(1000)), 431),
    "space-in-header-name": (b"GET /healthcheck HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n", 400),
    "nul-in-header": (b"GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n", 400),
    "no-target": (b"GET HTTP/1.1\r\nHost: x\r\n", 400),
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    harness = await start_cloud(tmp_path_factory.mktemp("malformed"), fake_hosts=1)
    yield harness
    await stop_cloud(harness)


def port_of(cfg, api: str) -> int:
    return {"compute": cfg.compute_api_port, "network": cfg.network_api_port, "image": cfg.image_api_port,
            "identity": cfg.identity_api_port}[api]


@pytest.mark.parametrize("api", list(NAMES_IT))
@pytest.mark.parametrize("case", list(MALFORMED))
@pytest.mark.parametrize("pieces", [1, 4])
async def test_a_request_head_the_server_cannot_serve_is_answered_in_the_apis_body(cloud, api, case, pieces):
    head, expected = MALFORMED[case]
    line, _, headers = head.partition(b"\r\n")
    status, answer_headers, body = await exchange(port_of(cloud.rt.cfg, api), line, pieces=pieces, headers=headers)
    assert status == expected, (status, body[:300])
    assert answer_headers["connection"] == "close"
    assert answer_headers["content-type"] == "application/json"
    assert NAMES_IT[api](json.loads(body), status), body


async def test_a_head_at_the_bound_is_served(cloud):
    line, close = b"GET /healthcheck HTTP/1.1", b"Connection: close"  # exchange ends the head with the latter
    pad = MAX_REQUEST_HEAD - len(line + b"\r\n" + b"Host: x\r\nX-Pad: " + b"\r\n" + close)
    status, _headers, body = await exchange(cloud.rt.cfg.compute_api_port, line,
                                            headers=b"Host: x\r\nX-Pad: " + b"p" * pad + b"\r\n")
    assert status == 200, body[:300]
