"""/metrics under abuse: its size after requests with made-up methods, and the event loop's
stall while a large registry is scraped.

Starts an in-process cloud (the tests' noauth cloud, one fake host) with the operator listener,
then

1. scrapes /metrics, sends ``--requests`` unauthenticated requests, each with a method of its
   own made up, spread over the four APIs, and scrapes again: page size and series, before and
   after;
2. adds ``--series`` series to the registry (what that many made-up methods used to add), and
   while /metrics is scraped (by curl, another process), measures the longest gap of a 1 ms ticker on the loop and the
   slowest answer of ``GET /v2.1/servers`` asked over and over.

The process's garbage collector is tuned as every ``nefos`` process tunes it once started
(``tune_gc_for_service``; ``--untuned-gc``: as the tests' clouds leave it, where a full collection
walks every object loaded at start and stalls the loop for hundreds of milliseconds, scrape or not).
Run it with another tree first on the path to compare (``PYTHONPATH=<tree>/src``).

  python bench/metrics_bounds.py --requests 10000 --series 200000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import Counter  # noqa: E402

from nefos.cmd.allinone import free_port  # noqa: E402
from nefos.service import tune_gc_for_service  # noqa: E402
from nefos.http_client import verified_tls
from tests.noauth import ADMIN  # noqa: E402
from tests.clouds import start_cloud, stop_cloud  # noqa: E402


async def made_up_methods(cfg, client: httpx.AsyncClient, count: int) -> None:
    ports = [cfg.compute_api_port, cfg.network_api_port, cfg.image_api_port, cfg.identity_api_port]
    for i in range(count):
        await client.request("X" + uuid.uuid4().hex.upper(), f"http://127.0.0.1:{ports[i % 4]}/v2.1/servers")


async def scrape(client: httpx.AsyncClient, url: str) -> str:
    r = await client.get(url)
    r.raise_for_status()
    return r.text


def series(page: str) -> int:
    return sum(1 for line in page.splitlines() if line and not line.startswith("#"))


async def stall_during_scrape(cfg, client: httpx.AsyncClient) -> dict:
    longest_gap, ticking = 0.0, True

    async def ticker() -> None:
        nonlocal longest_gap
        last = time.perf_counter()
        while ticking:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest_gap, last = max(longest_gap, now - last), now

    slowest_api, api_answers = 0.0, 0
    scrape_done = asyncio.Event()

    async def api_meanwhile() -> None:
        nonlocal slowest_api, api_answers
        while not scrape_done.is_set():
            started = time.perf_counter()
            r = await client.get(f"http://127.0.0.1:{cfg.compute_api_port}/v2.1/servers", headers=ADMIN)
            r.raise_for_status()
            slowest_api, api_answers = max(slowest_api, time.perf_counter() - started), api_answers + 1

    tick = asyncio.create_task(ticker())
    api = asyncio.create_task(api_meanwhile())
    started = time.perf_counter()
    # The scraper is a process of its own, as Prometheus is: reading the page costs this loop nothing.
    curl = await asyncio.create_subprocess_exec("curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}",
                                                f"http://127.0.0.1:{cfg.metrics_port}/metrics",
                                                stdout=asyncio.subprocess.PIPE)
    size = (await curl.communicate())[0]
    if curl.returncode != 0:
        raise SystemExit(f"the scrape failed: curl exited {curl.returncode}")
    page_bytes = int(size)
    scrape_seconds = time.perf_counter() - started
    scrape_done.set()
    await api
    ticking = False
    await tick
    return {"scrape_s": round(scrape_seconds, 2), "page_mb": round(page_bytes / 1e6, 1),
            "longest_loop_gap_ms": round(longest_gap * 1000, 1), "slowest_api_ms": round(slowest_api * 1000, 1),
            "api_answers_during_scrape": api_answers}


async def main(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cloud = await start_cloud(Path(tmp), fake_hosts=1, metrics_port=free_port())
        if not args.untuned_gc:
            tune_gc_for_service()  # as every `nefos` process does once its services started
        cfg = cloud.rt.cfg
        try:
            async with httpx.AsyncClient(verify=verified_tls(), timeout=600) as client:
                url = f"http://127.0.0.1:{cfg.metrics_port}/metrics"
                await made_up_methods(cfg, client, 4)
                before = await scrape(client, url)
                started = time.perf_counter()
                await made_up_methods(cfg, client, args.requests)
                took = time.perf_counter() - started
                after = await scrape(client, url)
                print(f"{args.requests} requests with made-up methods in {took:.1f} s: /metrics {len(before)} -> "
                      f"{len(after)} bytes, {series(before)} -> {series(after)} series")

                filler = Counter("nefos_bench_filler_total", "Series standing in for unbounded labels", ["key"])
                for i in range(args.series):
                    filler.labels(f"{i:032x}").inc()
                await client.get(f"http://127.0.0.1:{cfg.compute_api_port}/v2.1/servers", headers=ADMIN)
                print(f"a scrape with {args.series} more series:", await stall_during_scrape(cfg, client))
        finally:
            await stop_cloud(cloud)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--series", type=int, default=200000)
    parser.add_argument("--untuned-gc", action="store_true",
                        help="leave the garbage collector as the tests' clouds have it, not as `nefos` tunes it")
    asyncio.run(main(parser.parse_args()))
