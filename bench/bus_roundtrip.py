"""CPU cost of one RabbitMQ bus message: N calls and N casts between two processes.

A server process serves a topic on its own RabbitBus; this process calls and casts to it
(``--concurrency`` in flight at once). Reports, per message, the CPU of each side (from
/proc, user + system) and of the broker (beam.smp, when readable: other users of the broker
add to it), with the machine's reference timeit. The run has a vhost of its own, deleted
afterwards (``rabbitmqctl``).

  python bench/bus_roundtrip.py --messages 3000 --concurrency 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nefos.bus import Endpoint, create_bus  # noqa: E402
from nefos.bus.versioning import RPCInterface  # noqa: E402
from nefos.context import RequestContext  # noqa: E402

TOPIC = "bench"
VERSION = "1.0"
PAYLOAD = {"instance_uuid": str(uuid.uuid4()), "node": "bench-compute-1", "flavor": {"vcpus": 1, "memory_mb": 512}}


def reference_timeit() -> float:
    """ms per ``sum(range(10**6))`` (python3 -m timeit -n 20's loop, best of 3)."""
    import timeit
    return round(min(timeit.repeat("sum(range(10**6))", number=20, repeat=3)) / 20 * 1000, 1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid() -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "beam.smp":
                    return int(entry.name)
            except OSError:
                continue
    return None


class BenchServer(Endpoint):
    rpc_interface = RPCInterface(TOPIC, version=VERSION, methods={"echo": VERSION, "note": VERSION,
                                                                  "noted": VERSION})

    def __init__(self):
        self.casts = 0
        self.changed = asyncio.Condition()

    async def echo(self, ctx, **kwargs):
        return kwargs

    async def note(self, ctx, **kwargs):
        async with self.changed:
            self.casts += 1
            self.changed.notify_all()

    async def noted(self, ctx, count):
        """Returns once ``count`` casts have been handled."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.casts >= count)
        return self.casts


async def serve(url: str) -> None:
    bus = create_bus(url)
    await bus.start()
    await bus.serve(TOPIC, BenchServer())
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it
    await bus.stop()


async def drive(url: str, messages: int, concurrency: int, server_pid: int) -> dict:
    bus = create_bus(url)
    await bus.start()
    ctx = RequestContext(project_id=uuid.uuid4().hex, user_id=uuid.uuid4().hex, auth_token="t" * 180)
    beam = broker_pid()
    results = {}
    try:
        for _ in range(20):  # warm up: connections, queues, code paths
            await bus.call(ctx, TOPIC, "echo", version=VERSION, **PAYLOAD)

        async def phase(name: str, send, settle=None) -> None:
            sem = asyncio.Semaphore(concurrency)

            async def one():
                async with sem:
                    await send()

            before = (time.process_time(), cpu_seconds(server_pid), cpu_seconds(beam) if beam else 0.0)
            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(messages)))
            if settle is not None:
                await settle()
            wall = time.perf_counter() - start
            after = (time.process_time(), cpu_seconds(server_pid), cpu_seconds(beam) if beam else 0.0)
            per = [round((a - b) / messages * 1e6) for a, b in zip(after, before)]
            results[name] = {"client_us": per[0], "server_us": per[1], "broker_us": per[2] if beam else None,
                             "per_s": round(messages / wall)}

        await phase("call", lambda: bus.call(ctx, TOPIC, "echo", version=VERSION, **PAYLOAD))
        await phase("cast", lambda: bus.cast(ctx, TOPIC, "note", version=VERSION, **PAYLOAD),
                    settle=lambda: bus.call(ctx, TOPIC, "noted", version=VERSION, count=messages))
    finally:
        await bus.stop()
    return results


@contextlib.contextmanager
def profiled(out: str | None):
    if not out:
        yield
        return
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(out)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000, help="calls, then as many casts")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--amqp", default=os.environ.get("NEFOS_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--profile", metavar="FILE",
                        help="profile each side by its CPU clock, to FILE.client and FILE.server")
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args()
    if args.serve:
        with profiled(args.profile and args.profile + ".server"):
            asyncio.run(serve(args.serve))
        return
    vhost = f"nefos-bench-bus-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        url = args.amqp.rstrip("/") + "/" + vhost
        result = {"messages": args.messages, "concurrency": args.concurrency,
                  "reference_timeit_ms": reference_timeit()}
        server = subprocess.Popen([sys.executable, __file__, "--serve", url,
                                   *(["--profile", args.profile] if args.profile else [])],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != "ready":
                raise SystemExit("the bench server did not start")
            with profiled(args.profile and args.profile + ".client"):
                result.update(asyncio.run(drive(url, args.messages, args.concurrency, server.pid)))
        finally:
            server.stdin.close()
            server.wait(30)
        result["reference_timeit_ms_after"] = reference_timeit()
        print(json.dumps(result))
    finally:
        rabbitmqctl("delete_vhost", vhost)


if __name__ == "__main__":
    main()
