"""What every Nefos service process shares: the runtime (config, database, bus)
and the service lifecycle (registration, heartbeats, periodic tasks, bus serving).

Nothing here imports the database at module level: a compute host's process runs without one
(``Runtime.open(cfg, database=False)``) and registers and heartbeats through the conductor
(``ConductorServiceGroup``, Nova's servicegroup via the conductor); control-plane services
write their own rows (``DatabaseServiceGroup``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from typing import Awaitable, Callable

from nefos import fileperms
from nefos.bus import Bus, Endpoint, connect, create_bus
from nefos.bus.interfaces import RELEASES
from nefos.bus.versioning import VersionCaps
from nefos.component import Component  # noqa: F401  (where every service finds it)
from nefos.config import Config

LOG = logging.getLogger(__name__)


def tune_gc_for_service() -> None:
    """Call once a long-running process has started its services.

    Everything loaded at start-up lives as long as the process: ``gc.freeze()`` keeps it out of
    the collector's passes, which otherwise walk it again and again under load (measured:
    GET /servers/detail?limit=1000 with 10 000 servers, p50 374 -> 249 ms). The young generation
    is kept small so that no single pass stalls the event loop for long: with 50 000 a young pass
    took 12-33 ms and the event path's p99 was whichever pass landed in it (events bench, 2-core
    machine, 2026-11-24); with 5 000 a pass takes under 5 ms and the detailed list of 1000 is as
    fast (151 vs 154 ms)."""
    gc.freeze()
    gc.set_threshold(5000, 10, 10)


class Runtime:
    """The config, database and bus one process's services share (``db`` None: a compute host's
    process, which reaches the database only through the conductor)."""

    def __init__(self, cfg: Config, db, bus: Bus, sqlite_lock: str | None = None):
        self.cfg = cfg
        self.db = db
        self.bus = bus
        self._sqlite_lock = sqlite_lock

    @classmethod
    async def open(cls, cfg: Config, *, migrate: bool = False, database: bool = True) -> "Runtime":
        """``database`` False: no database at all (not even the SQLite state file)."""
        fileperms.passable_dir(cfg.state_dir)
        sqlite_lock = None
        if database and not cfg.database_url:  # the SQLite database in the state directory: 0600 before SQLite opens it
            from nefos.db import sqlite_owner
            sqlite_lock = sqlite_owner.acquire(cfg.state_dir)
            fileperms.private_file(cfg.sqlite_path)
        try:
            db = None
            if database:
                from nefos.db.session import Database
                db = Database(cfg.effective_database_url, max_pool_size=cfg.max_pool_size,
                              max_overflow=cfg.max_overflow)
            if migrate:
                from nefos.db.migrate import upgrade
                await upgrade(db)
            bus = create_bus(cfg.bus_url, cfg.control_exchange)
            bus.default_timeout = cfg.rpc_response_timeout
            bus.version_caps = VersionCaps(cfg.upgrade_levels, db=db, service_down_time=cfg.service_down_time,
                                           releases=RELEASES)
            await connect(bus)
        except BaseException:
            if sqlite_lock is not None:
                from nefos.db import sqlite_owner
                sqlite_owner.release(sqlite_lock)
            raise
        return cls(cfg, db, bus, sqlite_lock)

    async def close(self) -> None:
        try:
            await self.bus.stop()
            if self.db is not None:
                await self.db.dispose()
        finally:
            if self._sqlite_lock is not None:
                from nefos.db import sqlite_owner
                sqlite_owner.release(self._sqlite_lock)
                self._sqlite_lock = None


def first_run_delay(interval: float, fuzzy_delay: float) -> float:
    """When a periodic task first runs: after ``interval``, or, with ``periodic_fuzzy_delay``
    (Nova's option), at a random point of its first ``min(interval, fuzzy_delay)`` seconds.
    Hosts started together (a restart of every compute process, a simulator's thousand hosts)
    then spread their heartbeats and periodic passes over the interval instead of writing to the
    database all in the same instant, and no first run comes later than without it."""
    if fuzzy_delay <= 0:
        return interval
    return random.uniform(0, min(interval, fuzzy_delay))


class PeriodicTask:
    def __init__(self, name: str, interval: float, fn: Callable[[], Awaitable[None]],
                 initial_delay: float | None = None):
        self.name, self.interval, self.fn = name, interval, fn
        self.initial_delay = interval if initial_delay is None else initial_delay

    async def run_forever(self) -> None:
        await asyncio.sleep(self.initial_delay)
        while True:
            try:
                await self.fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("periodic task %s failed", self.name)
            await asyncio.sleep(self.interval)


class DatabaseServiceGroup:
    """A control-plane service's own row in ``services`` (Nova's servicegroup database driver)."""

    def __init__(self, rt: Runtime):
        self.rt = rt

    async def register(self, host: str, binary: str, topic: str | None, version: str | None = None) -> int:
        from nefos.db.retry import at_start
        from nefos.objects import service_rows
        return await at_start(lambda: service_rows.register(self.rt.db, host, binary, topic, version))

    async def heartbeat(self, service_id: int) -> None:
        from nefos.objects import service_rows
        await service_rows.heartbeat(self.rt.db, service_id)


class ConductorServiceGroup:
    """A compute host's service row, written by the conductor (the host has no database)."""

    def __init__(self, conductor):
        self.conductor = conductor

    async def register(self, host: str, binary: str, topic: str | None, version: str | None = None) -> int:
        return await self.conductor.service_register(None, host, binary, topic, version)

    async def heartbeat(self, service_id: int) -> None:
        await self.conductor.service_heartbeat(None, service_id)


class Service:
    """A registered service: a row in ``services``, a bus endpoint, a heartbeat (``group``: how
    the row is written; by default directly, a control-plane service's way).

    ``on_return``: what the service does when a report gets through after none did for at least
    ``service_down_time`` (the control plane judged it down meanwhile: a partition, a hung
    process). It runs beside the heartbeat, which goes on; it returns whether it is settled, and
    when it is not (or fails) it runs again after the next report that gets through."""

    def __init__(self, rt: Runtime, binary: str, topic: str | None, host: str,
                 endpoint: Endpoint | None = None, group=None,
                 on_return: Callable[[], Awaitable[bool]] | None = None):
        self.rt = rt
        self.group = group or DatabaseServiceGroup(rt)
        self.binary = binary
        self.topic = topic
        self.host = host
        self.endpoint = endpoint
        self.service_id: int | None = None
        self.periodic: list[PeriodicTask] = []
        self._tasks: list[asyncio.Task] = []
        self.on_return = on_return
        self._last_report_sent = time.monotonic()  # when the last report that got through was sent
        self._return_owed = False
        self._return_task: asyncio.Task | None = None
        self._listening = False

    def add_periodic(self, name: str, interval: float, fn, initial_delay: float | None = None) -> None:
        if interval is None or interval <= 0:
            return
        if initial_delay is None:
            initial_delay = first_run_delay(interval, self.rt.cfg.periodic_fuzzy_delay)
        self.periodic.append(PeriodicTask(name, interval, fn, initial_delay))

    @property
    def rpc_version(self) -> str | None:
        """The version of the RPC interface this service serves (its services row's ``version``,
        which the ``auto`` upgrade level reads); None: it serves none."""
        interface = getattr(self.endpoint, "rpc_interface", None)
        return interface.version if interface is not None and self.topic else None

    async def register(self) -> int:
        """Create or revive this (host, binary) row; returns its id."""
        sent = time.monotonic()
        self.service_id = await self.group.register(self.host, self.binary, self.topic, self.rpc_version)
        self._last_report_sent = sent
        return self.service_id

    async def heartbeat(self) -> None:
        sent = time.monotonic()
        await self.group.heartbeat(self.service_id)
        # From the previous report's sending to this one's answer: the longest the row can have
        # gone without an update, so a verdict of down is never missed (an extra on_return is
        # harmless, a missed one is not). A report held through a partition makes the next one
        # count from its sending too: the row may have been written then, its answer held.
        silent_for = time.monotonic() - self._last_report_sent
        self._last_report_sent = sent
        if self.on_return is None:
            return
        if silent_for >= self.rt.cfg.service_down_time:
            LOG.warning("%s on %s: no report got through for %.1f s (service_down_time %s s): it may have been "
                        "judged down meanwhile", self.binary, self.host, silent_for, self.rt.cfg.service_down_time)
            self._return_owed = True
        if self._return_owed and (self._return_task is None or self._return_task.done()):
            self._return_owed = False  # a return seen while this run goes on owes another one
            self._return_task = asyncio.create_task(self._run_on_return(), name=f"{self.binary}:on_return")

    async def _run_on_return(self) -> None:
        try:
            settled = await self.on_return()
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("%s on %s: the work after its return failed; again after the next report",
                          self.binary, self.host)
            settled = False
        if not settled:
            self._return_owed = True

    async def listen(self, *, ready: bool = False) -> None:
        """Take this service's messages from now on. Unless ``ready``, casts run once ``start`` is
        done and calls are refused until then (``nefos.bus.base.dispatch``): a compute host listens
        before it recovers its instances, so a cast sent meanwhile waits for it instead of being
        refused (as Nova's compute queue, which outlives its process, holds it)."""
        if self.endpoint is None or not self.topic or self._listening:
            return
        self.endpoint.rpc_ready = asyncio.Event()
        if ready:
            self.endpoint.rpc_ready.set()
        await self.rt.bus.serve(self.topic, self.endpoint, host=self.host)
        self._listening = True

    async def start(self) -> None:
        await self.register()
        # Registered, it can serve: ready from its first message. A message delivered while the
        # broker confirms the subscription would otherwise find it starting, and a call on a
        # shared topic (conductor, scheduler) be refused where another server could answer it.
        await self.listen(ready=True)
        self.add_periodic("heartbeat", self.rt.cfg.report_interval, self.heartbeat)
        for task in self.periodic:
            self._tasks.append(asyncio.create_task(task.run_forever(), name=f"{self.binary}:{task.name}"))
        if self._listening:
            self.endpoint.rpc_ready.set()
        LOG.info("%s started on host %s", self.binary, self.host)

    async def stop(self) -> None:
        if self._listening:
            await self.rt.bus.unserve(self.endpoint)
            self._listening = False
        if self._return_task is not None:
            self._tasks.append(self._return_task)
            self._return_task = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


class ServiceComponent(Component):
    """A component that is exactly one registered Service (conductor, scheduler, ...)."""

    def __init__(self, name: str, service: Service):
        self.name = name
        self.service = service

    async def start(self) -> None:
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()
