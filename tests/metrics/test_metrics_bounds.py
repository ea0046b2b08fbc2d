"""/metrics stays bounded whatever clients send, and a scrape never holds the event loop.

Every label of the process's metrics comes from a bounded set: a request method a client makes up
counts as ``OTHER``, a path is its route's template (``unmatched`` when no route matches), a status
is a three-digit code. A scrape renders the page in a worker thread: an API of the same process
answers while a scrape is under way, however long the page takes.

The registry is the process's own, shared with the other clouds of this test process: each check
compares the series before and after its own requests.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily

from nefos.cmd.allinone import free_port
from nefos.http_client import verified_tls
from tests.metrics.test_metrics import samples
from tests.noauth import ADMIN
from tests.clouds import start_cloud, stop_cloud

MADE_UP_METHODS = 300  # each one would be a series of its own if methods were not bounded
KNOWN_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}


@pytest.fixture
async def cloud(tmp_path):
    harness = await start_cloud(tmp_path, fake_hosts=1, metrics_port=free_port())
    yield harness
    await stop_cloud(harness)


def api_ports(cfg) -> dict[str, int]:
    return {"compute": cfg.compute_api_port, "network": cfg.network_api_port, "image": cfg.image_api_port,
            "identity": cfg.identity_api_port}


def series_in_registry() -> set[tuple]:
    """Every (sample name, labels) the process's registry holds now, read as a scrape reads it."""
    return {(s.name, tuple(sorted(s.labels.items()))) for family in REGISTRY.collect() for s in family.samples}


async def send_made_up_methods(cfg, count: int) -> None:
    """``count`` requests with methods no server knows, without a token, spread over the APIs."""
    ports = list(api_ports(cfg).values())
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        for i in range(count):
            method = "X" + uuid.uuid4().hex.upper()
            r = await client.request(method, f"http://127.0.0.1:{ports[i % len(ports)]}/v2.1/servers")
            assert r.status_code in (401, 404, 405), (method, r.status_code, r.text)


def api_series_by_method(found) -> dict[str, set]:
    methods: dict[str, set] = {}
    for name, labels in found:
        if name.startswith("nefos_api_request"):
            methods.setdefault(dict(labels)["method"], set()).add((name, labels))
    return methods


async def test_made_up_methods_add_no_series_to_the_metrics_page(cloud):
    port = cloud.rt.cfg.metrics_port
    async with httpx.AsyncClient(verify=verified_tls(), timeout=60) as client:
        await send_made_up_methods(cloud.rt.cfg, 4)  # the OTHER series exist from here on
        before = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        await send_made_up_methods(cloud.rt.cfg, MADE_UP_METHODS)
        after = (await client.get(f"http://127.0.0.1:{port}/metrics")).text

    new_series = set(samples(after)) - set(samples(before))
    assert not {s for s in new_series if s[0].startswith("nefos_api_request")}, sorted(new_series)[:5]
    methods = api_series_by_method(samples(after))
    assert set(methods) <= KNOWN_METHODS | {"OTHER"}, sorted(set(methods) - KNOWN_METHODS)[:5]
    other = {labels for name, labels in samples(after) if name == "nefos_api_requests_total"
             and dict(labels)["method"] == "OTHER"}
    assert {dict(labels)["service"] for labels in other} == set(api_ports(cloud.rt.cfg))
    # Only counts changed: the page's length moves by a few digits, not by a series a request.
    assert abs(len(after) - len(before)) < 2000, (len(before), len(after))


async def test_made_up_methods_add_no_series_with_the_shipped_defaults(tmp_path):
    """The shipped defaults serve no /metrics at all; the registry lives in the process regardless."""
    cloud = await start_cloud(tmp_path, fake_hosts=1)
    try:
        assert cloud.rt.cfg.metrics_port == 0
        await send_made_up_methods(cloud.rt.cfg, 4)
        before = series_in_registry()
        await send_made_up_methods(cloud.rt.cfg, MADE_UP_METHODS)
        grown = {s for s in series_in_registry() - before if s[0].startswith("nefos_api_request")}
        assert not grown, sorted(grown)[:5]
    finally:
        await stop_cloud(cloud)


async def test_known_methods_keep_their_own_label(cloud):
    async with httpx.AsyncClient(verify=verified_tls(), timeout=30) as client:
        r = await client.request("PATCH", f"http://127.0.0.1:{cloud.rt.cfg.compute_api_port}/v2.1/servers",
                                 headers=ADMIN)
        assert r.status_code == 405
        page = samples((await client.get(f"http://127.0.0.1:{cloud.rt.cfg.metrics_port}/metrics")).text)
    assert any(name == "nefos_api_requests_total" and dict(labels)["method"] == "PATCH"
               and dict(labels)["route"] == "/v2.1/servers" and dict(labels)["status"] == "405"
               for name, labels in page)


class HeldCollector:
    """A figure whose reading takes until the test lets it go (a stand-in for a registry too large
    to render quickly); ``released_in_time`` says whether it was let go or gave up waiting."""

    def __init__(self, hold_at_most: float):
        self.hold_at_most = hold_at_most
        self.reading = threading.Event()
        self.release = threading.Event()
        self.released_in_time: bool | None = None

    def describe(self):  # registered without being read
        return []

    def collect(self):
        self.reading.set()
        self.released_in_time = self.release.wait(self.hold_at_most)
        yield GaugeMetricFamily("nefos_test_held_figure", "A figure read slowly on purpose", value=1)


async def test_an_api_answers_while_a_scrape_is_under_way(cloud):
    cfg = cloud.rt.cfg
    held = HeldCollector(hold_at_most=20)
    REGISTRY.register(held)
    try:
        async with httpx.AsyncClient(verify=verified_tls(), timeout=60) as client:
            scrape_began = time.monotonic()
            scrape = asyncio.create_task(client.get(f"http://127.0.0.1:{cfg.metrics_port}/metrics"))
            # Wait (off the loop) until the scrape is reading the held figure.
            assert await asyncio.to_thread(held.reading.wait, 30), "the scrape never read the figures"
            r = await client.get(f"http://127.0.0.1:{cfg.compute_api_port}/v2.1/servers", headers=ADMIN)
            answered_after = time.monotonic() - scrape_began
            still_scraping = not scrape.done() and not held.release.is_set()
            held.release.set()
            page = await scrape
        assert r.status_code == 200, r.text
        assert still_scraping and held.released_in_time, \
            f"the API answered {answered_after:.1f} s into the scrape, once the scrape let go of the loop"
        assert page.status_code == 200 and "nefos_test_held_figure 1.0" in page.text
    finally:
        held.release.set()
        REGISTRY.unregister(held)

