"""One guest cannot delay another guest's metadata: a network's metadata proxy reads each request
with a deadline before it takes a slot of its bounded pool toward the metadata service, and caps
what one source address may hold (open connections, slots) and what the whole network may hold.

Each test is the attack, from one source address on loopback (the proxy serves on 127.0.0.1 as
it serves on 169.254.169.254 in a DHCP namespace; 127.0.0.2, 127.0.0.3, ... are the guests), with
the shipped defaults: another address's request is answered within a second.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from nefos.config import Config, ConfigError, load_config
from nefos.agents import metadata_proxy as mp
from tests.network.test_metadata_proxy import serve_on_loopback

SHIPPED = Config()
ATTACKER = "127.0.0.2"
VICTIM = "127.0.0.3"
GET = b"GET /openstack/latest/meta_data.json HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"
BIG = 3 * 1024 * 1024  # an answer more than a socket's buffers hold while nobody reads it


class SlowService:
    """The metadata service, whose ``/slow`` answers only once ``release`` is set."""

    def __init__(self):
        self.release = asyncio.Event()
        self.slow_sources: list[str] = []
        self.seen_slow = asyncio.Condition()
        self.big_answers: list[str] = []

        async def serve(request: Request):
            if request.url.path == "/slow":
                async with self.seen_slow:
                    self.slow_sources.append(request.headers["x-forwarded-for"])
                    self.seen_slow.notify_all()
                await self.release.wait()
            if request.url.path == "/big":
                self.big_answers.append(request.headers["x-forwarded-for"])
                return PlainTextResponse("x" * BIG)
            return PlainTextResponse(f"for {request.headers['x-forwarded-for']}")
        self.app = Starlette(routes=[Route("/{path:path}", serve, methods=["GET", "HEAD", "POST"])])


@pytest.fixture
async def proxy():
    """A network's proxy on 127.0.0.1 with the shipped limits; every 127.0.0.0/8 address is an
    instance of its own."""
    service = SlowService()

    async def lookup(network_id, ip):
        return (f"instance-{ip}", "t" * 32)

    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://metadata")
    served = mp.NetworkProxy("net-1", upstream, "s3cret", lookup)
    port = await serve_on_loopback(served)
    connections: list[Connection] = []
    yield {"port": port, "service": service, "proxy": served, "connections": connections}
    service.release.set()
    for c in connections:
        c.close()
    await served.close()
    await upstream.aclose()


class Connection:
    """A client's connection from a source address of its own."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.answer: asyncio.Task | None = None

    @classmethod
    async def open(cls, fixture, source: str, receive_buffer: int | None = None) -> "Connection":
        sock = socket.socket()
        if receive_buffer:  # before the connection: the window it offers
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        sock.bind((source, 0))
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", fixture["port"]))
        reader, writer = await asyncio.open_connection(sock=sock)
        conn = cls(reader, writer)
        fixture["connections"].append(conn)
        return conn

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def answered(self) -> asyncio.Task:
        """The whole answer (the proxy closes after it), as a task."""
        if self.answer is None:
            self.answer = asyncio.ensure_future(self.reader.read())
        return self.answer

    def close(self) -> None:
        if self.answer is not None:
            self.answer.cancel()
        self.writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


async def many(fixture, source: str, count: int) -> list[Connection]:
    return list(await asyncio.gather(*(Connection.open(fixture, source) for _ in range(count))))


async def timed_request(fixture, source: str, data: bytes = GET, bound: float = 5.0) -> tuple[int, float]:
    """(status, seconds) of one request from ``source``; fails when unanswered after ``bound`` s."""
    started = time.monotonic()
    conn = await Connection.open(fixture, source)
    conn.send(data)
    try:
        answer = await asyncio.wait_for(conn.answered(), bound)
    except TimeoutError:
        pytest.fail(f"a request from {source} was not answered within {bound} s")
    return status_of(answer), time.monotonic() - started


async def answered_within(conns: list[Connection], seconds: float) -> dict[Connection, int]:
    """The connections answered within ``seconds`` (and their statuses)."""
    tasks = {c.answered(): c for c in conns}
    done, _ = await asyncio.wait(tasks, timeout=seconds)
    return {tasks[t]: status_of(t.result()) for t in done}


async def test_two_hundred_idle_connections_from_one_address_delay_another_address_by_less_than_a_second(proxy):
    await many(proxy, ATTACKER, 200)
    status, seconds = await timed_request(proxy, VICTIM)
    assert status == 200
    assert seconds < 1.0, f"answered after {seconds:.2f} s"


async def test_a_slowloris_from_one_address_delays_another_address_by_less_than_a_second_and_is_cut_at_the_deadline(proxy):
    attack = await many(proxy, ATTACKER, 200)
    for conn in attack:
        conn.answered()  # read from the start: a refused connection's answer is there before it closes
    stop = asyncio.Event()

    async def trickle() -> None:
        """Every connection's request head, a byte at a time, round and round, never finished."""
        for conn in attack:
            conn.send(b"GET /openstack/latest/meta_data.json HTTP/1.1\r\n")
        line = b"X-Slow: a\r\n"
        for n in itertools.count():
            for conn in attack:
                if not conn.answered().done():
                    conn.send(line[n % len(line):n % len(line) + 1])
            await asyncio.sleep(0.2)  # the attack's pace, not an ordering of the test's events
            if stop.is_set():
                return

    trickling = asyncio.create_task(trickle())
    try:
        status, seconds = await timed_request(proxy, VICTIM)
        assert status == 200
        assert seconds < 1.0, f"answered after {seconds:.2f} s"
        # The ones the proxy reads are cut at the head deadline though bytes keep coming: 408.
        deadline = SHIPPED.metadata_proxy_http_request_timeout
        got = await answered_within(attack, deadline + 5.0)
        assert len(got) == len(attack)
        statuses = sorted(set(got.values()))
        assert statuses == [408, 429], statuses
        assert list(got.values()).count(408) == SHIPPED.metadata_proxy_maxconn_per_source
    finally:
        stop.set()
        await trickling


async def test_connections_beyond_the_per_address_cap_are_answered_429_at_once_and_the_others_are_served(proxy):
    attack = await many(proxy, ATTACKER, 200)
    got = await answered_within(attack, 2.0)
    assert got and set(got.values()) == {429}, f"{len(got)} of 200 answered within 2 s: {set(got.values())}"
    assert len(got) == 200 - SHIPPED.metadata_proxy_maxconn_per_source
    kept = [c for c in attack if c not in got]
    # While those are held, the address's next connection is refused at once as well...
    status, seconds = await timed_request(proxy, ATTACKER)
    assert status == 429 and seconds < 1.0
    # ...those kept are served as any connection: a request on one of them is answered...
    kept[0].send(GET)
    answer = await asyncio.wait_for(kept[0].answered(), 5.0)
    assert status_of(answer) == 200, answer
    # ...and once they are gone the address is served again.
    for conn in kept:
        conn.close()
    await wait_until(lambda: proxy["proxy"].open_connections(ATTACKER) == 0)
    status, _ = await timed_request(proxy, ATTACKER)
    assert status == 200


async def test_connections_beyond_the_network_s_cap_are_answered_503_at_once(proxy):
    per_source = SHIPPED.metadata_proxy_maxconn_per_source
    maxconn = SHIPPED.metadata_proxy_maxconn
    sources = [f"127.0.1.{n}" for n in range(1, maxconn // per_source + 1)]
    held = [c for s in sources for c in await many(proxy, s, per_source)]
    remainder = maxconn - len(held)
    held += await many(proxy, "127.0.2.1", remainder)
    await wait_until(lambda: proxy["proxy"].open_connections() == maxconn)
    assert await answered_within(held, 0.5) == {}  # all held, reading
    status, seconds = await timed_request(proxy, VICTIM)
    assert status == 503 and seconds < 1.0
    held[0].close()
    await wait_until(lambda: proxy["proxy"].open_connections() == maxconn - 1)
    status, _ = await timed_request(proxy, VICTIM)
    assert status == 200


async def test_one_address_s_requests_hold_at_most_four_slots_toward_the_metadata_service(proxy):
    service = proxy["service"]
    slow = b"GET /slow HTTP/1.1\r\n\r\n"
    attack = await many(proxy, ATTACKER, 8)  # within the address's cap of open connections
    for conn in attack:
        conn.send(slow)
    async with service.seen_slow:
        await asyncio.wait_for(service.seen_slow.wait_for(lambda: len(service.slow_sources) >= 4), 5.0)
    status, seconds = await timed_request(proxy, VICTIM)
    assert status == 200 and seconds < 1.0
    # The victim's request went by; the attacker's others wait for its own slots.
    assert await answered_within(attack, 0.5) == {}
    assert service.slow_sources == [ATTACKER] * 4
    assert len(attack) <= SHIPPED.metadata_proxy_maxconn_per_source
    service.release.set()
    got = await answered_within(attack, 10.0)
    assert list(got.values()) == [200] * len(attack)


async def test_a_client_that_does_not_read_its_answers_holds_no_slot_and_is_cut_at_the_deadline(proxy):
    attack = [await Connection.open(proxy, ATTACKER, receive_buffer=4096)
              for _ in range(SHIPPED.metadata_proxy_maxconn_per_source)]
    for conn in attack:
        conn.send(b"GET /big HTTP/1.1\r\n\r\n")  # and never read
    await wait_until(lambda: len(proxy["service"].big_answers) == len(attack))
    status, seconds = await timed_request(proxy, VICTIM)
    assert status == 200 and seconds < 1.0
    # The answers wait in the proxy's buffers, not in its slots; the connections are dropped once
    # the deadline to read them has passed, and the address is served again.
    assert proxy["proxy"].open_connections(ATTACKER) == len(attack)
    deadline = SHIPPED.metadata_proxy_http_request_timeout
    started = time.monotonic()
    await wait_until(lambda: proxy["proxy"].open_connections(ATTACKER) == 0, deadline + 5.0)
    assert time.monotonic() - started > deadline / 2  # (it was the deadline that ended them)
    status, _ = await timed_request(proxy, ATTACKER)
    assert status == 200


async def wait_until(condition, timeout: float = 5.0) -> None:
    """Until ``condition()`` holds (the proxy's bookkeeping runs on this loop)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_the_options_set_the_limits_the_dhcp_agent_s_proxies_use(tmp_path):
    cfg = load_config(state_dir=tmp_path, metadata_proxy_http_request_timeout="2.5", metadata_proxy_maxconn="7",
                      metadata_proxy_maxconn_per_source="3")
    assert mp.Limits.of(cfg) == mp.Limits(http_request_timeout=2.5, maxconn=7, maxconn_per_source=3)
    assert mp.SHIPPED_LIMITS == mp.Limits(10.0, 256, 10) == mp.Limits.of(load_config(state_dir=tmp_path))
    for name, bad in [("metadata_proxy_http_request_timeout", "0"), ("metadata_proxy_maxconn", "0"),
                      ("metadata_proxy_maxconn_per_source", "-1")]:
        with pytest.raises(ConfigError, match=name):
            load_config(state_dir=tmp_path, **{name: bad})


async def test_an_operator_s_per_address_cap_is_the_one_enforced():
    async def lookup(network_id, ip):
        return (f"instance-{ip}", "t" * 32)
    service = SlowService()
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://metadata")
    served = mp.NetworkProxy("net-2", upstream, "s3cret", lookup, mp.Limits(10.0, 256, 2))
    fixture = {"port": await serve_on_loopback(served), "connections": []}
    try:
        held = await many(fixture, ATTACKER, 3)
        got = await answered_within(held, 2.0)
        assert list(got.values()) == [429]
    finally:
        for c in fixture["connections"]:
            c.close()
        await served.close()
        await upstream.aclose()
