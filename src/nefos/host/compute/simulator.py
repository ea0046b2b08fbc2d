"""Many simulated compute hosts in one process, for scale tests (``nefos simulate-hosts``).

Each simulated host is a real compute service — the same ``ComputeComponent`` a ``nefos
compute`` process runs, with the fake driver and its fake L2 agent: its own service row and
heartbeat, its own periodic tasks, its own bus topic ``compute.<host>``, and no database (it
reaches it through the conductor, as every compute host does) — only the process, its event loop
and its bus connection are shared. So what a thousand hosts cost the control plane (heartbeat
calls and writes, periodic reads, bus queues and consumers) is what a thousand real hosts would
cost it, without a thousand processes.

What makes many hosts in one process expensive, and what is done about it here:

* starting them: each host registers, checks its node identity, reconciles its (empty)
  hypervisor and declares its queues — a few conductor calls and broker round trips each.
  ``start_concurrency`` hosts start at once (not one after the other, nor all together, which
  would queue a thousand calls on the conductors' few database connections).
* periodic work landing at once: every host's heartbeat and periodic tasks first run at a
  random point of their interval (``periodic_fuzzy_delay``, ``nefos.service.first_run_delay``),
  so they stay spread instead of a thousand writes every ``report_interval`` in one instant.
* unchanged periodic writes: the vif-wait summary is sent only when it changed
  (``ComputeManager.periodic_publish_vif_wait_stats``); the heartbeat still goes each interval,
  as Nova's ``report_state`` does — that is the liveness the scheduler reads.
"""

from __future__ import annotations

import asyncio
import logging

from nefos.service import Component

LOG = logging.getLogger(__name__)

START_CONCURRENCY = 16


def host_names(prefix: str, count: int, first: int = 1) -> list[str]:
    return [f"{prefix}-{i}" for i in range(first, first + count)]


class SimulatedHosts(Component):
    """``count`` fake compute hosts named ``<prefix>-<first>`` ... in this process."""

    def __init__(self, rt, prefix: str, count: int, first: int = 1,
                 start_concurrency: int = START_CONCURRENCY):
        from nefos.host.compute.service import ComputeComponent
        if rt.cfg.compute_driver != "fake":
            raise ValueError("simulated hosts run the fake driver (compute_driver = fake)")
        self.name = f"simulated hosts {prefix}-{first}..{prefix}-{first + count - 1}"
        self.rt = rt
        self.hosts = [ComputeComponent(rt, host) for host in host_names(prefix, count, first)]
        self.start_concurrency = max(1, start_concurrency)
        self._started: list = []

    async def start(self) -> None:
        gate = asyncio.Semaphore(self.start_concurrency)

        async def start_one(host) -> None:
            async with gate:
                await host.start()
                self._started.append(host)

        results = await asyncio.gather(*(start_one(h) for h in self.hosts), return_exceptions=True)
        failed = [(h.host, r) for h, r in zip(self.hosts, results) if isinstance(r, BaseException)]
        if failed:
            await self.stop()
            host, exc = failed[0]
            raise RuntimeError(f"{len(failed)} simulated host(s) could not start; {host}: {exc!r}") from exc
        LOG.info("%d simulated compute hosts started", len(self.hosts))

    async def stop(self) -> None:
        gate = asyncio.Semaphore(self.start_concurrency)

        async def stop_one(host) -> None:
            async with gate:
                try:
                    await host.stop()
                except Exception:
                    LOG.exception("stopping simulated host %s failed", host.host)

        started, self._started = self._started, []
        await asyncio.gather(*(stop_one(h) for h in started))


def component(rt, prefix: str, count: int, first: int = 1) -> Component:
    return SimulatedHosts(rt, prefix, count, first)
