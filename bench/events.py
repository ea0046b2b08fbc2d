"""External events benchmark: from a port going ACTIVE to the waiting build unblocked.

The whole cloud in this process (Compute API, conductor, scheduler, network
service with its notifier, compute hosts with the fake driver and fake L2
agent), on the in-process bus or on RabbitMQ (``--bus amqp://...``), SQLite
by default (``--db`` for PostgreSQL/MySQL). Servers are booted one after the
other (``--concurrency`` for more at once); for each build the benchmark
takes

* ``active``: the moment the port's ACTIVE status committed in the network
  service (a port change hook, after commit),
* ``arrived``: the moment the event reached the compute host's waiter,
* ``unblocked``: the moment the build's wait returned (the guest is resumed next),

and prints p50 / p90 / p99 / max of active -> unblocked (the issue's number),
split into active -> arrived (notifier, HTTP, Compute API, inbox, bus) and
arrived -> unblocked (waking the build), plus the whole boot time.

``--scenario stop``: out-of-band stops. Boots the servers, then stops each
guest behind Nefos' back (the fake hypervisor's own power-off, which emits
libvirt's STOPPED lifecycle event) one after the other and takes the time until
the Compute API shows it SHUTOFF with no task_state: the lifecycle event path
(``lifecycle_stopped_delay`` 0 by default here, ``--stopped-delay``), without
the periodic sync.

``--scenario sync``: one power-state sync pass (``_sync_power_states``) on
every host at once over ``--instances`` instances (default 10 000) spread over
``--hosts`` hosts (default 10). The instances are written straight into the
database and the fake hypervisors (booting 10 000 through the API is the boot
benchmark's job); ``--diverged`` of them (default 1 %) have a guest that
stopped without an event, which the pass must find and stop through the API's
stop path. Prints the pass's wall time and how many it stopped.

``send_events_interval`` is 0 by default here (the number is the path's
latency, not the batching window: with the default 2 s, an event that follows
another within 2 s waits for the window); ``--interval 2`` measures with it.

  python bench/events.py --servers 200
  python bench/events.py --servers 200 --bus amqp://guest:guest@127.0.0.1:5672/
  python bench/events.py --scenario stop --servers 100
  python bench/events.py --scenario sync --instances 10000 --hosts 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from nefos.cmd.allinone import Cloud, all_in_one_components, free_port  # noqa: E402
from nefos.host.compute import instance_events  # noqa: E402
from nefos.config import load_config  # noqa: E402
from nefos.db.session import after_commit  # noqa: E402
from nefos.service import Runtime, tune_gc_for_service  # noqa: E402
from nefos.http_client import verified_tls
from tests.noauth import ADMIN  # noqa: E402  (the identity a noauth cloud takes from the headers)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(name: str, seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    row = {"n": len(ms), "p50_ms": pct(ms, 50), "p90_ms": pct(ms, 90), "p99_ms": pct(ms, 99),
           "max_ms": max(ms) if ms else float("nan"), "mean_ms": statistics.fmean(ms) if ms else float("nan")}
    print(f"  {name:<28} n={row['n']:<5} p50 {row['p50_ms']:8.2f} ms   p90 {row['p90_ms']:8.2f} ms   "
          f"p99 {row['p99_ms']:8.2f} ms   max {row['max_ms']:8.2f} ms")
    return row


async def run(args) -> dict:
    state = Path(tempfile.mkdtemp(prefix="nefos-bench-events-"))
    overrides = dict(state_dir=state, auth_strategy="noauth", compute_api_port=free_port(),
                     network_api_port=free_port(), image_api_port=free_port(), identity_api_port=free_port(),
                     send_events_interval=args.interval, fake_l2_agent_delay=args.agent_delay,
                     lifecycle_stopped_delay=args.stopped_delay,
                     sync_power_state_interval=-1, report_interval=5.0, quota_instances=-1, quota_cores=-1,
                     quota_ram=-1, quota_ports=-1, bus_url=args.bus)
    if args.db:
        overrides["database_url"] = args.db
    cfg = load_config(**overrides)
    rt = await Runtime.open(cfg, migrate=True)
    cfg.host = "bench"
    components = all_in_one_components(rt, fake_hosts=args.hosts)
    cloud = Cloud(rt, components)
    await cloud.start()
    tune_gc_for_service()  # as `nefos up` and every service process do
    network = next(c for c in components if getattr(c, "notifier", None) is not None)
    active_at: dict[str, float] = {}

    async def hook(s, ctx, before, after):
        if after is not None and after["status"] == "ACTIVE" and (before or {}).get("status") != "ACTIVE":
            port = after["id"]
            after_commit(s, lambda: active_at.__setitem__(port, time.monotonic()))
    network.manager.store.add_port_change_hook(hook)
    compute = httpx.AsyncClient(verify=verified_tls(),
                                base_url=f"http://127.0.0.1:{cfg.compute_api_port}", timeout=60, headers=ADMIN)
    neutron = httpx.AsyncClient(verify=verified_tls(),
                                base_url=f"http://127.0.0.1:{cfg.network_api_port}", timeout=60, headers=ADMIN)
    try:
        r = await neutron.post("/v2.0/networks", json={"network": {"name": "bench"}})
        net = r.json()["network"]
        await neutron.post("/v2.0/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.0.0.0/16",
                                                             "ip_version": 4}})
        from nefos.control.image.bootstrap import ensure_default_image
        image = await ensure_default_image(rt)
        boot_times: list[float] = []
        sem = asyncio.Semaphore(args.concurrency)
        created: dict[str, asyncio.Future] = {}

        async def on_notification(notification):
            if notification["event_type"] in ("instance.create.end", "instance.create.error"):
                uuid = notification["payload"]["nova_object.data"]["uuid"]
                future = created.setdefault(uuid, asyncio.get_running_loop().create_future())
                if not future.done():
                    future.set_result(notification["event_type"])
        await rt.bus.listen_notifications(on_notification)

        async def one(i: int) -> None:
            async with sem:
                t0 = time.monotonic()
                r = await compute.post("/v2.1/servers", json={"server": {
                    "name": f"b{i}", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}]}})
                assert r.status_code == 202, r.text
                sid = r.json()["server"]["id"]
                # Waiting on the build's end notification, not by polling the API: a poller in this
                # process would load the event loop the measured path runs on.
                await created.setdefault(sid, asyncio.get_running_loop().create_future())
                s = (await compute.get(f"/v2.1/servers/{sid}")).json()["server"]
                assert s["status"] == "ACTIVE" and s["OS-EXT-STS:task_state"] is None, s
                boot_times.append(time.monotonic() - t0)
                if args.spacing:
                    await asyncio.sleep(args.spacing)

        if args.scenario == "sync":
            return await power_sync_pass(args, rt, components, image)
        if args.scenario == "stop":
            return await out_of_band_stops(args, compute, components, image, net)
        instance_events.WAIT_METRICS.clear()
        for i in range(args.warmup):
            await one(-1 - i)
        instance_events.WAIT_METRICS.clear()
        boot_times.clear()
        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(args.servers)))
        elapsed = time.monotonic() - started
        total, transport, wake = [], [], []
        for m in (m for host_waits in instance_events.WAIT_METRICS.values() for m in host_waits):
            if m["what"] != "spawn" or m["result"] != "ok":
                continue
            for key, arrived in m["events"].items():
                port = key[len("network-vif-plugged-"):]
                if port in active_at:
                    total.append(m["unblocked_at"] - active_at[port])
                    transport.append(arrived - active_at[port])
            if m["events"]:
                wake.append(m["unblocked_at"] - max(m["events"].values()))
        if len(total) != args.servers:
            raise SystemExit(f"{len(total)} of {args.servers} builds waited for their port's network-vif-plugged: "
                             "the figures would not be the path's")
        print(f"\nbus {args.bus}, db {'sqlite' if not args.db else args.db.split(':')[0]}, {args.servers} servers, "
              f"concurrency {args.concurrency}, {args.hosts} host(s), send_events_interval {args.interval:g} s, "
              f"agent delay {args.agent_delay:g} s; {elapsed:.1f} s")
        result = {
            "bus": args.bus, "servers": args.servers, "concurrency": args.concurrency,
            "send_events_interval": args.interval, "python": platform.python_version(),
            "port_active_to_unblocked": summary("port ACTIVE -> unblocked", total),
            "port_active_to_event_arrived": summary("  ACTIVE -> event at compute", transport),
            "event_arrived_to_unblocked": summary("  event -> unblocked", wake),
            "boot": summary("boot (POST -> create.end)", boot_times),
        }
        return result
    finally:
        await compute.aclose()
        await neutron.aclose()
        await cloud.stop()
        await rt.close()


async def wait_server(compute: httpx.AsyncClient, sid: str, status: str, poll: float = 0.002) -> dict:
    while True:
        server = (await compute.get(f"/v2.1/servers/{sid}")).json()["server"]
        if server["status"] in (status, "ERROR") and server["OS-EXT-STS:task_state"] is None:
            assert server["status"] == status, server
            return server
        await asyncio.sleep(poll)


def compute_managers(components) -> list:
    return [c.manager for c in components if hasattr(c, "driver") and hasattr(c, "manager")]


async def out_of_band_stops(args, compute: httpx.AsyncClient, components, image: str, net: dict) -> dict:
    """Boot ``--servers`` servers, then stop each guest out of band and time it to SHUTOFF."""
    drivers = {m.host: m.driver for m in compute_managers(components)}
    sids = []
    for i in range(args.servers):
        r = await compute.post("/v2.1/servers", json={"server": {
            "name": f"s{i}", "imageRef": image, "flavorRef": "1", "networks": [{"uuid": net["id"]}]}})
        assert r.status_code == 202, r.text
        sids.append(r.json()["server"]["id"])
    hosts = {sid: (await wait_server(compute, sid, "ACTIVE", 0.02))["OS-EXT-SRV-ATTR:host"] for sid in sids}
    latencies = []
    for sid in sids:
        started = time.monotonic()
        drivers[hosts[sid]].simulate_power_off(sid)
        await wait_server(compute, sid, "SHUTOFF")
        latencies.append(time.monotonic() - started)
    print(f"\n{args.servers} out-of-band stops, one at a time, lifecycle_stopped_delay {args.stopped_delay:g} s, "
          f"periodic sync off, bus {args.bus}")
    return {"scenario": "stop", "servers": args.servers, "stopped_delay": args.stopped_delay,
            "stop_to_shutoff": summary("guest stopped -> SHUTOFF", latencies)}


async def power_sync_pass(args, rt, components, image: str) -> dict:
    """One power-state sync pass on every host at once over ``--instances`` instances."""
    import random
    import uuid as uuidlib

    from nefos.host.compute import power_sync
    from nefos.db.models import Instance
    from nefos.model import states
    from nefos.host.virt.fake import FakeGuest

    managers = compute_managers(components)
    rows, diverged = [], set()
    rng = random.Random(1)
    for i in range(args.instances):
        manager = managers[i % len(managers)]
        uuid = str(uuidlib.uuid4())
        rows.append(dict(uuid=uuid, project_id="bench", user_id="bench", display_name=f"p{i}",
                         vm_state=states.ACTIVE, power_state=states.RUNNING, host=manager.host,
                         node=manager.host, image_ref=image, vcpus=1, memory_mb=512, root_gb=1))
        guest = FakeGuest(uuid=uuid, name=f"instance-{i:08x}", power_state=states.RUNNING, vcpus=1,
                          memory_mb=512)
        if rng.random() < args.diverged:
            guest.power_state = states.SHUTDOWN  # stopped with no event: only the sync can see it
            diverged.add(uuid)
        manager.driver.guests[uuid] = guest
    from sqlalchemy import insert
    async with rt.db.transaction() as s:
        for start in range(0, len(rows), 1000):
            await s.execute(insert(Instance), rows[start:start + 1000])
    started = time.monotonic()
    await asyncio.gather(*(power_sync.sync_power_states(m) for m in managers))
    elapsed = time.monotonic() - started
    async with rt.db.reader() as s:
        from sqlalchemy import func, select
        stopped = (await s.execute(select(func.count()).select_from(Instance).where(
            Instance.vm_state == states.STOPPED))).scalar()
    print(f"\npower-state sync pass: {args.instances} instances on {len(managers)} hosts, "
          f"{len(diverged)} diverged: {elapsed:.2f} s, {stopped} stopped")
    assert stopped == len(diverged), (stopped, len(diverged))
    return {"scenario": "sync", "instances": args.instances, "hosts": len(managers),
            "diverged": len(diverged), "stopped": stopped, "pass_seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("vif", "stop", "sync"), default="vif")
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--instances", type=int, default=10000, help="sync scenario: instances")
    parser.add_argument("--diverged", type=float, default=0.01,
                        help="sync scenario: share of guests stopped without an event")
    parser.add_argument("--stopped-delay", type=float, default=0.0, help="lifecycle_stopped_delay")
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--bus", default="local://")
    parser.add_argument("--db", default="", help="database URL (default: SQLite in a temp dir)")
    parser.add_argument("--interval", type=float, default=0.0, help="send_events_interval")
    parser.add_argument("--agent-delay", type=float, default=0.0, help="fake_l2_agent_delay")
    parser.add_argument("--spacing", type=float, default=0.0, help="pause after each boot (seconds)")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.ERROR)
    result = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
