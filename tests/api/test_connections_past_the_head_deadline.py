"""A request head trickled past ``http_request_timeout`` (10 s shipped) is answered 408 in each
listener's own error body. The deadline ends with the head: a console
websocket and an event stream held past it keep working, and each leaves its listener's count when
it ends. Between requests on a keep-alive connection the wait is uvicorn's ``timeout_keep_alive``
(75 s in Nefos) instead: an idle keep-alive connection outlives the head deadline and ends then;
the next head, once its first byte came, must be whole within the deadline (408 after it, however
it trickles). All with the shipped options.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import pytest_asyncio
from websockets.asyncio.client import connect

from nefos.cmd.allinone import free_port
from nefos.config import Config
from nefos.http_client import verified_tls
from tests.api.test_request_line_limit import port_of
from tests.noauth import ADMIN
from tests.clouds import member, start_cloud, stop_cloud
from tests.servers.test_consoles import _handshake, _server, _vnc_url, _websocket_url

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHIPPED = Config()
PAST_THE_DEADLINE = SHIPPED.http_request_timeout + 1
KEEP_ALIVE = 75  # uvicorn's timeout_keep_alive as nefos.cmd.allinone sets it


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cloud(tmp_path_factory):
    harness = await start_cloud(tmp_path_factory.mktemp("head-deadline"), fake_hosts=1, metrics_port=free_port())
    yield harness
    await stop_cloud(harness)


def listener(cloud, port: int):
    """The connections the listener on ``port`` holds (``nefos.http_server.ListenerConnections``)."""
    for server, _task in cloud.cloud._servers:
        if server.config.port == port:
            return server.config.http_protocol_class.listener
    raise AssertionError(f"no listener on {port}")


async def until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


# Each listener, and how its error body names the timeout.
LISTENERS = {
    "compute": lambda body: body["computeFault"]["code"] == 408,
    "network": lambda body: body["NeutronError"]["type"] == "RequestTimeout",
    "image": lambda body: body["code"].startswith("408 "),
    "identity": lambda body: body["error"]["code"] == 408,
    "metadata": None,
    "dashboard": None,
    "console proxy": None,
    "metrics": None,
}


async def trickle_until_answered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[bytes, float]:
    """A request head's start, then a header byte a second, never its end: what the server answers
    until it closes, and how long after the first byte."""
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()

    async def trickle() -> None:
        while True:
            await asyncio.sleep(1)  # the attacker's pace
            writer.write(b"X")
    trickling = asyncio.create_task(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), SHIPPED.http_request_timeout + 10)
    finally:
        trickling.cancel()
    return answer, time.monotonic() - started


async def trickled_head(port: int) -> tuple[bytes, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await trickle_until_answered(reader, writer)
    finally:
        writer.close()


async def test_a_head_trickled_past_the_deadline_is_answered_408_in_each_listener_s_error_body(cloud):
    answers = await asyncio.gather(*(trickled_head(port_of(cloud.rt.cfg, name)) for name in LISTENERS))
    for (name, names_it), (answer, took) in zip(LISTENERS.items(), answers):
        assert answer.startswith(b"HTTP/1.1 408 "), (name, answer[:300])
        assert SHIPPED.http_request_timeout - 1 <= took <= SHIPPED.http_request_timeout + 5, (name, took)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower() and b"x-openstack-request-id: req-" in head.lower(), head
        if names_it is not None:
            assert names_it(json.loads(body)), (name, body)


async def test_a_console_websocket_held_past_the_head_deadline_still_carries_the_console_and_leaves_the_count(cloud):
    url = await _vnc_url(cloud, await _server(cloud))
    proxy = listener(cloud, cloud.rt.cfg.novncproxy_port)
    async with connect(_websocket_url(url), subprotocols=["binary"], open_timeout=10) as ws:
        assert proxy.open_total == 1
        await asyncio.sleep(PAST_THE_DEADLINE)  # the time the property is about, not an ordering
        assert len(await _handshake(ws)) > 24
    await until(lambda: proxy.open_total == 0, 10, f"{proxy.open_total} connections still counted")


async def test_an_event_stream_held_past_the_head_deadline_still_delivers_events(cloud):
    net = await cloud.make_network(name="stream-net", headers=member())
    async with httpx.AsyncClient(verify=verified_tls(), timeout=httpx.Timeout(30, read=30)) as client:
        async with client.stream("GET", f"http://127.0.0.1:{cloud.rt.cfg.compute_api_port}/v2.1/nefos-events",
                                 headers=ADMIN) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: stream.connected"
            await asyncio.sleep(PAST_THE_DEADLINE)  # the time the property is about, not an ordering
            sid = (await cloud.boot(networks=[{"uuid": net["id"]}], headers=member()))["server"]["id"]
            async with asyncio.timeout(30):
                async for line in lines:
                    if line.startswith("data:") and sid in line and "server.created" in line:
                        break


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """GET / on a keep-alive connection: the answer's status line."""
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    await asyncio.wait_for(reader.readexactly(length), 10)
    return head.split(b"\r\n")[0]


async def test_the_next_head_on_a_keep_alive_connection_trickled_past_the_deadline_is_answered_408(cloud):
    reader, writer = await asyncio.open_connection("127.0.0.1", cloud.rt.cfg.compute_api_port)
    try:
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200 ")
        answer, took = await trickle_until_answered(reader, writer)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and b"computeFault" in answer, answer[:300]
    assert SHIPPED.http_request_timeout - 1 <= took <= SHIPPED.http_request_timeout + 5, took


async def test_a_keep_alive_connection_idle_between_requests_outlives_the_head_deadline_and_ends_at_the_keep_alive_timeout(cloud):
    reader, writer = await asyncio.open_connection("127.0.0.1", cloud.rt.cfg.compute_api_port)
    try:
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        await asyncio.sleep(PAST_THE_DEADLINE)  # the time the property is about, not an ordering
        assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200 "), "closed at the head deadline"
        answered = time.monotonic()
        assert await asyncio.wait_for(reader.read(), KEEP_ALIVE + 10) == b""  # the server's close, nothing said
        idle = time.monotonic() - answered
    finally:
        writer.close()
    assert KEEP_ALIVE - 1 <= idle <= KEEP_ALIVE + 10, idle
