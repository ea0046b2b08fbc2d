"""One reader of the event stream's log per API process, fanning each new entry out to the
process's streaming clients (``GET /v2.1/nefos-events``).

The reader keeps a floor: every id at or below it was delivered or is known never to come. Ids
are given when a row is inserted but seen when its transaction commits, so a later id can be
visible before an earlier one; the reader then stops at the missing id and delivers nothing past
it until it appears, or until ``event_stream_gap_timeout`` seconds passed (its transaction rolled
back: the id is never used). Entries are therefore delivered in id order, each once, and a client
that resumes after id N reads the log's (N, floor] and then the live entries, with no loss.

The reader polls every ``event_stream_poll_interval`` seconds while some client streams, and
stops ``_LINGER`` seconds after the last one left (a client reconnecting within that time finds
it where it was).

The hub also admits the streams: at most ``event_stream_max_clients`` in the process and
``event_stream_max_per_user`` per user; one more is refused with 429 before anything is sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import Callable

from nefos import exceptions
from nefos.objects import event_log

LOG = logging.getLogger(__name__)

_PAGE = 1000
_LINGER = 60.0
# A client that cannot keep up is cut (it resumes with Last-Event-ID) rather than held in memory.
QUEUE_SIZE = 10000
OVERFLOW = object()
END = object()  # the process is stopping: the stream ends (its client reconnects elsewhere or later)
# Seconds a refused client is told to wait (Retry-After): streams are long, a place rarely frees at once.
RETRY_AFTER = 15


class Subscriber:
    def __init__(self, accepts: Callable[[dict], bool]):
        self.accepts = accepts
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUE_SIZE + 1)
        self.start = 0  # the hub's floor when it joined: its live entries are those after it
        self.overflowed = False

    def offer(self, entry: dict) -> None:
        if self.overflowed or not self.accepts(entry):
            return
        if self.queue.qsize() >= QUEUE_SIZE:
            self.overflowed = True
            self.queue.put_nowait(OVERFLOW)
            return
        self.queue.put_nowait(entry)


class EventHub:
    def __init__(self, db, cfg):
        self.db = db
        self.cfg = cfg
        self.floor: int | None = None
        self.subscribers: set[Subscriber] = set()
        self._task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._gap_since: dict[int, float] = {}
        self._idle_since: float | None = None
        self.open_streams = 0
        self.open_streams_of: collections.Counter[str] = collections.Counter()

    def admit(self, user_id: str) -> Callable[[], None]:
        """A place for one more stream of ``user_id``, or TooManyRequests (429); call what it
        returns, once or more, when the stream ends."""
        if self.open_streams >= self.cfg.event_stream_max_clients:
            raise exceptions.TooManyRequests(
                f"This API process serves its maximum of {self.cfg.event_stream_max_clients} event streams; "
                f"try again in {RETRY_AFTER} seconds.", retry_after=RETRY_AFTER)
        if self.open_streams_of[user_id] >= self.cfg.event_stream_max_per_user:
            raise exceptions.TooManyRequests(
                f"This user has its maximum of {self.cfg.event_stream_max_per_user} event streams open; "
                f"close one or try again in {RETRY_AFTER} seconds.", retry_after=RETRY_AFTER)
        self.open_streams += 1
        self.open_streams_of[user_id] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.open_streams -= 1
            self.open_streams_of[user_id] -= 1
            if not self.open_streams_of[user_id]:
                del self.open_streams_of[user_id]
        return release

    async def subscribe(self, accepts: Callable[[dict], bool]) -> Subscriber:
        subscriber = Subscriber(accepts)
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="event-stream-reader")
        await self._ready.wait()
        subscriber.start = self.floor
        self.subscribers.add(subscriber)
        self._idle_since = None
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        if not self.subscribers:
            self._idle_since = time.monotonic()

    def end_streams(self) -> None:
        for subscriber in self.subscribers:
            with contextlib.suppress(asyncio.QueueFull):
                subscriber.queue.put_nowait(END)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:  # the database away for a moment: its clients wait for it, as they would for events
            try:
                self.floor = await event_log.newest_id(self.db)
                break
            except Exception:
                LOG.warning("event stream: reading the log failed; trying again", exc_info=True)
                await asyncio.sleep(self.cfg.event_stream_poll_interval)
        self._gap_since.clear()
        self._ready.set()
        self._idle_since = time.monotonic() if not self.subscribers else None
        while True:
            if self._idle_since is not None and time.monotonic() - self._idle_since > _LINGER:
                return
            try:
                while await self._read_once():
                    pass
            except Exception:  # the database away for a moment: the clients wait, nothing is skipped
                LOG.warning("event stream: reading the log failed; trying again", exc_info=True)
            await asyncio.sleep(self.cfg.event_stream_poll_interval)

    async def _read_once(self) -> bool:
        """Deliver what is there past the floor; whether a full page came (read again at once)."""
        rows = await event_log.read_after(self.db, self.floor, limit=_PAGE)
        now = time.monotonic()
        for row in rows:
            missing = self.floor + 1
            if row["id"] != missing:
                since = self._gap_since.setdefault(missing, now)
                if now - since < self.cfg.event_stream_gap_timeout:
                    return False
                LOG.debug("event stream: ids %d-%d never committed; passing them", missing, row["id"] - 1)
                del self._gap_since[missing]
            self.floor = row["id"]
            for subscriber in list(self.subscribers):
                subscriber.offer(row)
        return len(rows) == _PAGE


def hub_of(app) -> EventHub:
    hub = getattr(app.state, "event_hub", None)
    if hub is None:
        rt = app.state.rt
        hub = app.state.event_hub = EventHub(rt.db, rt.cfg)
    return hub
