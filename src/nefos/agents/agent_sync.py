"""What the DHCP and L3 agents share: their sync loop.

An agent mirrors objects of the network service on this machine (the DHCP agent networks, the L3
agent routers). The network service fans out a notification after a change to some of them commits
(``nefos.control.network.agent_notifier``), and the agent syncs those at once (``SyncLoop``): notifications arriving while a sync runs coalesce
into one more sync of everything they named. Every ``interval`` seconds it syncs every object, the
backstop for a lost notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

from nefos.waiting import event_set_within

LOG = logging.getLogger(__name__)


class SyncLoop:
    """The agent side, a mixin. The agent has ``rt``, ``host``, ``name``, ``interval``, ``endpoint``
    and ``sync(ids)`` (``ids`` None: every object), calls ``_init_sync_loop()`` in its
    ``__init__``, ``_serve_and_loop(topic)`` to start and ``_unserve_and_stop_loop()`` to stop.
    ``full_syncs`` and ``partial_syncs`` count the syncs done (for tests)."""

    log = LOG  # the agent's logger

    def _init_sync_loop(self) -> None:
        self._dirty: set[str] = set()  # objects notified since the last sync began
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._serving = False
        self.full_syncs = 0  # periodic (every object) syncs done
        self.partial_syncs = 0  # notified (some objects) syncs done

    def _mark_changed(self, ids) -> None:
        """Sync ``ids`` as soon as the current sync (if any) ends."""
        self._dirty.update(ids)
        self._kick.set()

    async def _before_pass(self) -> None:
        """Each pass of the loop, before its sync (a failure is logged as the sync's)."""

    async def _after_pass(self) -> None:
        """Each pass of the loop, after its sync (done or failed)."""

    def _longest_wait(self) -> float:
        """The longest the loop sleeps between passes (besides the periodic sync's due time)."""
        return math.inf

    async def _serve_and_loop(self, topic: str) -> None:
        await self.rt.bus.serve(topic, self.endpoint, host=self.host)
        self._serving = True
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def _unserve_and_stop_loop(self) -> None:
        if self._serving:
            self._serving = False
            with contextlib.suppress(Exception):
                await self.rt.bus.unserve(self.endpoint)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()  # at start: every object
        while True:
            try:
                await self._before_pass()
                if loop.time() >= next_full:
                    next_full = loop.time() + self.interval
                    self._dirty.clear()
                    self._kick.clear()
                    await self.sync()
                    self.full_syncs += 1
                elif self._dirty:
                    ids, self._dirty = self._dirty, set()
                    self._kick.clear()
                    await self.sync(ids)
                    self.partial_syncs += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s: sync failed", self.name)
            await self._after_pass()
            if self._dirty:
                continue  # notified while syncing: at once
            await event_set_within(self._kick, max(0.0, min(next_full - loop.time(), self._longest_wait())))
