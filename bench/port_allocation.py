"""One server port's cost on the compute side: ``NetworkAPI.allocate_for_instance`` of one new port
on the member's network, bound to a host, in process (SQLite, the in-process bus, the network
service's own manager), for N servers one after another, each run on a fresh database.

Prints, per run: the median and 90th percentile of one allocation (ms), the process's CPU time per
allocation, the messages the client sent per allocation, and the machine's reference
(``python3 -m timeit -n 20 "sum(range(10**6))"``, best of 3) measured in the same run.

  python bench/port_allocation.py --servers 300 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from nefos.config import load_config  # noqa: E402
from nefos.context import RequestContext  # noqa: E402
from nefos.clients.network import NetworkAPI  # noqa: E402
from nefos.control.network.service import component  # noqa: E402
from nefos.service import Runtime  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from boot import reference_timeit  # noqa: E402

PROJECT = "b" * 32
MEMBER = RequestContext(project_id=PROJECT, user_id="u" * 32, roles=["member", "reader"], is_admin=False)


async def one_run(servers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="nefos-ports-") as state:
        rt = await Runtime.open(load_config(state_dir=state, auth_strategy="noauth"), migrate=True)
        network = component(rt)
        await network.start()
        try:
            manager = network.manager
            await manager.update_quota(RequestContext(), PROJECT, {"port": -1})
            net = await manager.create_network(MEMBER, {"name": "bench"})
            await manager.create_subnet(MEMBER, {"network_id": net["id"], "cidr": "10.0.0.0/16", "ip_version": 4})
            api = NetworkAPI(rt)
            sent: list[str] = []
            real_call = api.client.call

            async def counting_call(ctx, method, **kwargs):
                sent.append(method)
                return await real_call(ctx, method, **kwargs)
            api.client.call = counting_call
            times = []
            cpu = time.process_time()
            for i in range(servers):
                instance = {"uuid": str(uuid.uuid4()), "project_id": PROJECT, "host": f"host-{i % 10}",
                            "availability_zone": "nova"}
                started = time.perf_counter()
                await api.allocate_for_instance(MEMBER, instance, [{"uuid": net["id"]}], [])
                times.append((time.perf_counter() - started) * 1000)
            cpu = time.process_time() - cpu
        finally:
            await network.stop()
            await rt.close()
    times.sort()
    return {"median_ms": round(statistics.median(times), 2), "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
            "cpu_ms_per_port": round(cpu / servers * 1000, 2), "messages_per_port": round(len(sent) / servers, 2),
            "messages": sorted(set(sent))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(args.runs):
        result = asyncio.run(one_run(args.servers))
        print(json.dumps({"run": run + 1, "servers": args.servers, **result,
                          "reference_timeit_ms": reference_timeit()}), flush=True)


if __name__ == "__main__":
    main()
