"""How long one guest's idle or slow connections delay another guest's metadata request.

A network's metadata proxy (``nefos.agents.metadata_proxy``, the shipped limits) serves on
127.0.0.1 in front of a metadata service that answers at once; the attacker (127.0.0.2) opens
``--connections`` connections and holds them idle, or trickles a request head into each a byte at
a time (``--slowloris``); then the victim (127.0.0.3) asks ``--requests`` times, one after the
other. Prints the victim's latencies and what the attacker's connections got.

  python bench/metadata_starvation.py --connections 200
  python bench/metadata_starvation.py --connections 200 --slowloris
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import time
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nefos.agents import metadata_proxy as mp  # noqa: E402

GET = b"GET /openstack/latest/meta_data.json HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"


async def victim_request(port: int, bound: float) -> tuple[int, float]:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.3", 0))
    writer.write(GET)
    try:
        answer = await asyncio.wait_for(reader.read(), bound)
    except TimeoutError:
        return 0, bound
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1]), time.monotonic() - started


async def main(args) -> dict:
    async def serve(request):
        return PlainTextResponse("{}")

    async def lookup(network_id, ip):
        return (f"instance-{ip}", "t" * 32)

    app = Starlette(routes=[Route("/{path:path}", serve)])
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://metadata")
    proxy = mp.NetworkProxy("bench", upstream, "secret", lookup)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    await proxy.serve(sock)
    port = sock.getsockname()[1]

    attack = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
              for _ in range(args.connections)]
    answers = [asyncio.ensure_future(r.read()) for r, _ in attack]
    stop = asyncio.Event()

    async def trickle():
        line = b"X-Slow: a\r\n"
        for _, w in attack:
            w.write(b"GET / HTTP/1.1\r\n")
        n = 0
        while not stop.is_set():
            for (_, w), answer in zip(attack, answers):
                if not answer.done():
                    w.write(line[n % len(line):n % len(line) + 1])
            n += 1
            await asyncio.sleep(0.2)

    trickling = asyncio.create_task(trickle()) if args.slowloris else None
    latencies = []
    for _ in range(args.requests):
        status, seconds = await victim_request(port, args.bound)
        latencies.append((status, round(seconds, 3)))
    stop.set()
    if trickling:
        await trickling
    done = [a for a in answers if a.done() and not a.exception()]
    statuses: dict[str, int] = {}
    for a in done:
        key = a.result().split(b" ", 2)[1].decode() if a.result() else "closed"
        statuses[key] = statuses.get(key, 0) + 1
    for _, w in attack:
        w.close()
    for a in answers:
        a.cancel()
    await proxy.close()
    await upstream.aclose()
    seconds = [s for _, s in latencies]
    return {"connections": args.connections, "slowloris": args.slowloris, "victim": latencies,
            "victim_max_s": max(seconds), "victim_median_s": statistics.median(seconds),
            "attacker_answered_meanwhile": statuses}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--slowloris", action="store_true")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--bound", type=float, default=60.0, help="give up on a victim's request after this long")
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps(result))
    unanswered = [status for status, _ in result["victim"] if status != 200]
    if unanswered:  # the figures are the victim's latencies: a request not served is a failure, not a figure
        sys.exit(f"{len(unanswered)} of the victim's requests got no 200: {unanswered}")
