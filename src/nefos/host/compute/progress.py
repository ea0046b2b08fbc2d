"""A compute host's writes on one instance during one operation, sent in as few conductor calls
as the operation's order allows (``instance_progress``, conductor 1.3).

A step that ended well (an action event's finish, a short step's record) or an external event
handled for the operation need not be written on its own: it waits, with the host's time of
it, for the operation's next conductor call, which carries it ahead of its own writes. The next
call follows at once (nothing in between waits on anything but the host's own work), so the
action events read the same: the same results, and the times the host saw. A failure is written
at once, with whatever waits. Against a conductor pinned below 1.3, or one that refuses 1.3 (an
older conductor during a rolling upgrade), every write is its own call, as before.

This module imports nothing of the database: a compute host uses it.
"""

from __future__ import annotations

import contextlib
import time
import traceback as tb
from typing import Awaitable, Callable

from nefos import exceptions, metrics
from nefos.bus.versioning import NoSuchMethod, UnsupportedVersion
from nefos.timeutils import utcnow

_NOT_STARTED = object()


def _failure(exc: BaseException) -> dict:
    return {"result": "Error", "traceback": "".join(tb.format_exception(exc)),
            "details": str(exc)[:255] if isinstance(exc, exceptions.NefosError) else None}


class InstanceProgress:
    """The pending writes of one operation on ``instance_uuid`` as ``ctx``'s request."""

    def __init__(self, conductor, ctx, instance_uuid: str, host: str):
        self.conductor = conductor
        self.ctx = ctx
        self.instance_uuid = instance_uuid
        self.host = host
        self._finished: list[dict] = []
        self._recorded: list[dict] = []
        self._processed: list[dict] = []
        self._inbox: tuple[str, Callable[[list[dict]], Awaitable[None]]] | None = None
        self._batching: bool | None = None

    async def batching(self) -> bool:
        """Whether the conductor takes ``instance_progress`` (asked once per operation)."""
        if self._batching is None:
            self._batching = await self.conductor.serves("1.3")
        return self._batching

    @property
    def pending(self) -> bool:
        return bool(self._finished or self._recorded or self._processed or self._inbox)

    # Writes that wait for the next call -------------------------------------------------------
    async def finish(self, event_id: int | None, *, result: str = "Success", traceback: str | None = None,
                     details: str | None = None) -> None:
        """The action event ``event_id`` ended now (``action_event_finish``)."""
        if event_id is None:
            return
        if not await self.batching():
            await self.conductor.action_event_finish(self.ctx, event_id, result=result, traceback=traceback,
                                                     details=details)
            return
        self._finished.append({"event_id": event_id, "finish_time": utcnow().isoformat(), "result": result,
                               "traceback": traceback, "details": details})

    async def record(self, event: str, start_time: str, *, result: str = "Success", traceback: str | None = None,
                     details: str | None = None) -> None:
        """A short step that ran from ``start_time`` until now (``action_record_event``)."""
        if not await self.batching():
            await self.conductor.action_record_event(self.ctx, self.instance_uuid, event, self.host, start_time,
                                                     result=result, traceback=traceback, details=details)
            return
        self._recorded.append({"event": event, "start_time": start_time, "finish_time": utcnow().isoformat(),
                               "result": result, "traceback": traceback, "details": details})

    async def processed(self, ctx, event: dict, event_name: str, result: str, details: str, *,
                        consume_event: bool = False, traceback: str | None = None,
                        processed_at: str | None = None) -> None:
        """An external event handled for the operation at ``processed_at`` (default: now)
        (``event_inbox_record_processing``, as ``ctx``)."""
        if not await self.batching():
            await self.conductor.event_inbox_record_processing(ctx, event, event_name, self.host, result, details,
                                                               consume_event=consume_event, traceback=traceback)
            return
        self._processed.append({"event": event, "event_name": event_name, "result": result, "details": details,
                                "consume_event": consume_event, "traceback": traceback,
                                "processed_at": processed_at or utcnow().isoformat()})

    async def read_inbox(self, operation: str, deliver: Callable[[list[dict]], Awaitable[None]]) -> None:
        """The inbox's events of ``operation``, handed to ``deliver`` once the next call read them."""
        if not await self.batching():
            await deliver(await self.conductor.event_inbox_stored(None, self.instance_uuid, operation))
            return
        self._inbox = (operation, deliver)

    # Calls ----------------------------------------------------------------------------------
    async def send(self, *, begin_operation: str | None = None, saves: tuple[dict, ...] = (),
                   start_event: str | None = None, finished_after: tuple[int | None, ...] = ()) -> dict:
        """What waits, then ``begin_operation``, ``saves`` ({updates, expected_task_state?,
        expected_vm_state?}, one after the other), ``start_event`` and the events
        ``finished_after`` (ended by the saves: finished only when they succeed), in one call.
        Returns {instance: the last save's row, event_id: the started event's}; raises as a save does."""
        finished_after = [e for e in finished_after if e is not None]
        if not await self.batching():
            return await self._send_one_by_one(begin_operation, saves, start_event, finished_after)
        finished, recorded, processed, inbox = self._finished, self._recorded, self._processed, self._inbox
        self._finished, self._recorded, self._processed, self._inbox = [], [], [], None
        now = utcnow().isoformat()
        try:
            answer = await self.conductor.instance_progress(
                self.ctx, self.instance_uuid, self.host, finished=finished, recorded=recorded, processed=processed,
                begin_operation=begin_operation, saves=list(saves), start_event=start_event,
                finished_after=[{"event_id": e, "finish_time": now} for e in finished_after],
                inbox_operation=inbox[0] if inbox else None)
        except (UnsupportedVersion, NoSuchMethod) as exc:  # an older conductor: nothing was written
            self.conductor.refused("1.3", exc)
            self._batching = False
            for done in finished:
                await self.finish(done["event_id"], result=done["result"], traceback=done["traceback"],
                                  details=done["details"])
            for step in recorded:
                await self.record(step["event"], step["start_time"], result=step["result"],
                                  traceback=step["traceback"], details=step["details"])
            for handled in processed:
                await self.processed(self.ctx, handled["event"], handled["event_name"], handled["result"],
                                     handled["details"], consume_event=handled["consume_event"],
                                     traceback=handled["traceback"])
            if inbox:
                await self.read_inbox(*inbox)
            return await self._send_one_by_one(begin_operation, saves, start_event, finished_after)
        if inbox:
            await inbox[1](answer["stored_events"])
        return answer

    async def _send_one_by_one(self, begin_operation, saves, start_event, finished_after) -> dict:
        answer: dict = {"instance": None, "event_id": None}
        if begin_operation is not None:
            await self.conductor.event_operation_begin(None, self.instance_uuid, begin_operation, self.host)
        for save in saves:
            expected = {k: v for k, v in save.items() if k != "updates"}
            answer["instance"] = await self.conductor.instance_save(None, self.instance_uuid, save["updates"],
                                                                    **expected)
        if start_event is not None:
            answer["event_id"] = await self.conductor.action_event_start(self.ctx, self.instance_uuid, start_event,
                                                                         self.host)
        for event_id in finished_after:
            await self.conductor.action_event_finish(self.ctx, event_id)
        return answer

    async def flush(self) -> None:
        """Write what waits, if anything does."""
        if self.pending:
            await self.send()

    async def fail(self, event_id: int | None, exc: BaseException) -> None:
        """The event ``event_id`` failed with ``exc``: written at once, with what waits."""
        await self.finish(event_id, **_failure(exc))
        await self.flush()

    @contextlib.asynccontextmanager
    async def step(self, event: str, *, show_in_progress: bool = True, event_id=_NOT_STARTED):
        """``ConductorAPI.step`` whose writes ride on the operation's calls: a long step starts
        in a call of its own (carrying what waits) unless ``event_id`` (started by an earlier
        call) is given, and its finish waits for the next call; a short step's record waits too. A
        failure is written at once."""
        start_time = utcnow().isoformat()
        started = time.monotonic()
        if show_in_progress and event_id is _NOT_STARTED:
            event_id = (await self.send(start_event=event))["event_id"]
        try:
            yield
        except BaseException as exc:
            metrics.STEP_DURATION.labels(event, "Error").observe(time.monotonic() - started)
            if show_in_progress:
                await self.fail(event_id, exc)
            else:
                await self.record(event, start_time, **_failure(exc))
                await self.flush()
            raise
        metrics.STEP_DURATION.labels(event, "Success").observe(time.monotonic() - started)
        if show_in_progress:
            await self.finish(event_id)
        else:
            await self.record(event, start_time)
