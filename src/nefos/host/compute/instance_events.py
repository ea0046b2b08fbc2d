"""External events on the compute host: waiting for them, and handling the ones nobody waits for (Nova's ``InstanceEvents``).

The Compute API stores every accepted event in the durable inbox
(``instance_external_events``, one row per instance, name, tag and
*operation*) before it casts it here, so an event is never lost to a race:

* ``begin_operation`` starts an operation that may wait for events (a build,
  a start, a hard reboot) *before* anything that can trigger them (binding
  the ports, plugging the VIFs): it writes the instance's current operation,
  which the API stamps on every event it accepts from then on, and drops the
  events of earlier operations. An event left over from an earlier operation
  therefore never satisfies a later waiter.
* ``prepare_for_instance_event`` registers a waiter, and
  ``wait_for_instance_event`` — Nova's context manager: names or
  (name, tag) pairs, a deadline, an ``error_callback`` — registers its
  waiters, then reads the inbox, so an event accepted anywhere between the
  start of the operation and the registration is delivered too; while it
  waits it re-reads the inbox every ``INBOX_POLL`` seconds (a lost cast only
  costs time) and, when given ``abort_check``, gives up as soon as the
  instance is being deleted. A ``failed`` event goes to the callback: False
  stops waiting, an exception propagates, anything else waits on. The
  deadline raises ``asyncio.TimeoutError``.
* ``external_instance_event`` (the cast from the API): an event a waiter of
  the current operation expects wakes it at once; ``network-changed``
  refreshes that one port in the network info cache; ``network-vif-deleted``
  drops that VIF from it; ``power-update`` (2.76) has the manager apply the
  reported power state (``ComputeManager.power_update``); an unexpected
  ``network-vif-plugged`` is logged and
  kept in the inbox (a waiter of the same operation may still come). Each
  processing result is recorded as an event of the API's instance action
  (``compute_external_instance_event``), apart from the API's acceptance.

``spawn`` and ``replug`` are the build's and the start / hard reboot's use:
wait only when the driver can start guests paused, the guest is to run and
``vif_plugging_timeout`` > 0; the wait list comes from each port's binding
(``binding:vif_details["vif_plugged_event"]``: ``plug`` — the agent reports
the plugged device, ``bind`` — sent at binding time, ``none`` — never) and,
for a spawn, only from VIFs not active yet. The guest is created paused and
resumed when every event arrived. On timeout with ``vif_plugging_is_fatal``
the guest is powered off and the build aborts with
``VirtualInterfaceCreateException`` (the build's cleanup unplugs the VIFs and
deletes or unbinds the ports; no reschedule); without it the operation goes
on and the missed events are recorded as a warning. Every wait is recorded
with its duration (action event ``compute_wait_for_vif_plugged`` and
``WAIT_METRICS``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import enum
import logging
import time
import traceback
import uuid as uuidlib

from nefos import exceptions, metrics
from nefos.host.compute.progress import InstanceProgress
from nefos.model import states
from nefos.timeutils import utcnow

LOG = logging.getLogger(__name__)

VIF_PLUGGED = "network-vif-plugged"
VIF_UNPLUGGED = "network-vif-unplugged"
VIF_DELETED = "network-vif-deleted"
NETWORK_CHANGED = "network-changed"
POWER_UPDATE = "power-update"

VIF_EVENT_DETAIL = "vif_plugged_event"  # binding:vif_details key: "plug" | "bind" | "none"
WAIT_EVENT = "compute_wait_for_vif_plugged"
PROCESS_EVENT = "compute_external_instance_event"
# While waiting, the inbox is re-read (a backstop: the bus delivers events and the inbox is read
# once when the waiters register) every INBOX_POLL seconds, doubling up to INBOX_POLL_MAX, so a
# long queue of waiting builds does not load the database. A delete wakes its waiters at once.
INBOX_POLL = 2.0
INBOX_POLL_MAX = 30.0

# Each host's last waits: instance, what (spawn, start, hard reboot), seconds waited, result, when the
# waiter was unblocked and when each event arrived (time.monotonic()): the wait metric. Kept per host:
# a process of many simulated hosts summarises one host's waits, not every host's, each report_interval.
WAIT_METRICS: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=10000))


def wait_summary(host: str, window: float = 3600.0, not_before: float = 0.0) -> dict:
    """The host's vif-event waits of the last ``window`` seconds (and not before ``not_before``, the
    start of this compute service): how many, how long, how many timed out or failed (published on
    its service row, shown by the hypervisor health API)."""
    since = max(time.time() - window, not_before)
    waits = [m for m in list(WAIT_METRICS.get(host, ())) if m["at"] >= since]
    seconds = sorted(m["seconds"] for m in waits)

    def pct(p: float) -> float | None:
        return round(seconds[min(len(seconds) - 1, int(len(seconds) * p))], 3) if seconds else None
    return {"window_seconds": window, "count": len(waits), "p50_seconds": pct(0.5), "p99_seconds": pct(0.99),
            "max_seconds": round(seconds[-1], 3) if seconds else None,
            "timeouts": sum(1 for m in waits if m["result"] == "timeout"),
            "failed": sum(1 for m in waits if m["result"] == "failed")}


def make_key(name: str, tag: str | None) -> str:
    """Nova's event key: ``name-tag`` (or the name alone)."""
    return f"{name}-{tag}" if tag else name


def _norm(event_name) -> tuple[str, str]:
    if isinstance(event_name, (tuple, list)):
        name, tag = event_name
        return name, tag or ""
    return event_name, ""


def _observe_delivery(event: dict) -> None:
    """The time from the event's arrival at the Compute API to its delivery here (the two hosts'
    clocks, as NTP keeps them)."""
    try:
        received = dt.datetime.fromisoformat(event["received_at"])
    except (KeyError, TypeError, ValueError):
        return  # sent by a Compute API that predates the field
    metrics.EXTERNAL_EVENT_DELIVERY.labels(event["name"]).observe(
        max((utcnow() - received).total_seconds(), 0.0))


class WaitOutcome(enum.Enum):
    """How a wait for vif events ended (the label of its metric and of its summary's counts)."""
    OK = "ok"  # every event arrived (a failed one too, when vif_plugging_is_fatal is False)
    TIMEOUT = "timeout"  # vif_plugging_timeout passed first
    FAILED = "failed"  # an event arrived failed, with vif_plugging_is_fatal


@dataclasses.dataclass(frozen=True)
class VifWaitResult:
    """The end of a wait for vif events: how it ended, the seconds waited, and ``fatal``: it ended
    short with ``vif_plugging_is_fatal`` (Nova's semantics), so the caller undoes what the wait's
    body did."""
    outcome: WaitOutcome
    seconds: float
    fatal: bool


@dataclasses.dataclass
class _Wait:
    """One wait while it runs: its waiters, its action event and when it started, and, once it
    ended, how (``InstanceEvents._wait_ending``)."""
    futures: dict = dataclasses.field(default_factory=dict)
    event_id: int | None = None
    started: float | None = None
    unblocked: float = 0.0
    outcome: WaitOutcome = WaitOutcome.OK
    error: BaseException | None = None
    records: list[dict] = dataclasses.field(default_factory=list)


class InstanceEvents:
    def __init__(self, manager):
        self.manager = manager
        self.rt = manager.rt
        self.host = manager.host
        self._waiters: dict[str, dict[tuple[str, str], asyncio.Future]] = {}
        self._operations: dict[str, str] = {}  # instance uuid -> its current operation (this host)
        # instance uuid -> (name, tag) of the events its current operation's waiters received, so a
        # second copy (the bus after the inbox re-read, or a duplicate post) is known as such.
        self._delivered: dict[str, set[tuple[str, str]]] = {}
        self._cache_locks: dict[str, asyncio.Lock] = {}
        # Waiters that write the records of their events' deliveries themselves (``_wait_around``).
        self._record_takers: set[asyncio.Future] = set()

    @property
    def cfg(self):
        return self.rt.cfg

    # Operations ------------------------------------------------------------------
    async def begin_operation(self, uuid: str) -> str:
        """Start an operation that may wait for events; call before anything can trigger them."""
        op = self.new_operation()
        await self.manager.conductor.event_operation_begin(None, uuid, op, self.host)
        self.operation_begun(uuid, op)
        return op

    @staticmethod
    def new_operation() -> str:
        """A new operation's id, for a caller that begins it in a conductor call of its own
        (``InstanceProgress.send(begin_operation=...)``), then calls ``operation_begun``."""
        return uuidlib.uuid4().hex

    def operation_begun(self, uuid: str, op: str) -> None:
        self._operations[uuid] = op
        self._delivered.pop(uuid, None)

    # Waiting ---------------------------------------------------------------------
    def prepare_for_instance_event(self, instance: dict, name: str, tag: str | None = None) -> asyncio.Future:
        """Register a waiter for (name, tag); before whatever triggers the event."""
        waiters = self._waiters.setdefault(instance["uuid"], {})
        key = (name, tag or "")
        fut = waiters.get(key)
        if fut is None or fut.done():
            fut = waiters[key] = asyncio.get_running_loop().create_future()
        LOG.debug("instance %s: preparing to wait for external event %s", instance["uuid"], make_key(*key))
        return fut

    def _clear_waiters(self, uuid: str, keys) -> None:
        waiters = self._waiters.get(uuid)
        if not waiters:
            return
        for key in keys:
            fut = waiters.pop(key, None)
            self._record_takers.discard(fut)
            if fut is not None and not fut.done():
                fut.cancel()
            elif fut is not None and not fut.cancelled():
                fut.exception()  # retrieved: an abort's exception is not "never retrieved"
        if not waiters:
            self._waiters.pop(uuid, None)

    async def _deliver_stored(self, uuid: str, progress=None) -> None:
        """Hand the inbox's events of the current operation to their waiters (with ``progress``,
        read by the operation's next conductor call)."""
        op = self._operations.get(uuid)
        waiters = self._waiters.get(uuid)
        if not op or not waiters:
            return
        if progress is not None:
            await progress.read_inbox(op, lambda rows: self._deliver_rows(uuid, rows))
            return
        await self._deliver_rows(uuid, await self.manager.conductor.event_inbox_stored(None, uuid, op))

    async def _deliver_rows(self, uuid: str, rows: list[dict]) -> None:
        waiters = self._waiters.get(uuid) or {}
        consumed = []
        for row in rows:
            fut = waiters.get((row["name"], row["tag"] or ""))
            if fut is not None and not fut.done():
                fut.set_result({"name": row["name"], "tag": row["tag"], "status": row["status"],
                                "arrived": time.monotonic(), "source": "inbox"})
                LOG.info("instance %s: event %s (%s) found in the inbox: the waiting operation is unblocked",
                         uuid, make_key(row["name"], row["tag"]), row["status"])
                self._delivered.setdefault(uuid, set()).add((row["name"], row["tag"] or ""))
                consumed.append(row["id"])
        if consumed:
            await self.manager.conductor.event_inbox_consume(None, consumed)

    def forget(self, uuid: str) -> None:
        """The instance is gone from this host: drop what is kept about it."""
        self._operations.pop(uuid, None)
        self._delivered.pop(uuid, None)
        self._cache_locks.pop(uuid, None)

    def abort_waits(self, uuid: str, exc: BaseException) -> None:
        """Wake every waiter of ``uuid`` with ``exc`` (the instance is being deleted)."""
        for fut in (self._waiters.get(uuid) or {}).values():
            if not fut.done():
                fut.set_exception(exc)

    def _default_error_callback(self, event_name: str, instance: dict):
        raise exceptions.NefosError(f"Instance event failed: {event_name}")

    @contextlib.asynccontextmanager
    async def wait_for_instance_event(self, instance: dict, event_names, deadline: float = 300,
                                      error_callback=None, abort_check=None, progress=None,
                                      take_records: bool = False):
        """Plan to wait for ``event_names``, run the body, then wait (Nova's semantics).

        ``abort_check``: an async callable run at each inbox re-read while waiting; it raises to
        stop waiting (e.g. the instance is being deleted). ``progress``: the operation's
        ``InstanceProgress``, whose next call (the body's) reads the inbox the first time.
        ``take_records``: the caller writes the record of each event delivered from the bus (the
        ``record`` of its result) instead of the event's handler.
        """
        uuid = instance["uuid"]
        if error_callback is None:
            error_callback = self._default_error_callback
        keys = list(dict.fromkeys(_norm(e) for e in event_names))
        futures = {key: self.prepare_for_instance_event(instance, *key) for key in keys}
        if take_records:
            self._record_takers.update(futures.values())
        try:
            await self._deliver_stored(uuid, progress)  # arrived before the waiters were registered
            yield futures
            if progress is not None:
                await progress.flush()  # the inbox read, if the body made no call
            poll = INBOX_POLL
            async with asyncio.timeout(deadline):
                for key, fut in futures.items():
                    while not fut.done():
                        await asyncio.wait([fut], timeout=poll)
                        poll = min(2 * poll, INBOX_POLL_MAX)
                        if not fut.done():
                            await self._deliver_stored(uuid)
                            if abort_check is not None:
                                await abort_check()
                    event = fut.result()
                    if event["status"] == "completed":
                        continue
                    decision = error_callback(make_key(*key), instance)
                    if decision is False:
                        break
        finally:
            self._clear_waiters(uuid, keys)

    # Events from the API ---------------------------------------------------------------
    async def external_instance_event(self, ctx, events: list[dict]) -> None:
        for event in events:
            try:
                await self._process(ctx, event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one failing event never stops the others
                LOG.exception("instance %s: processing event %s failed", event.get("instance_uuid"),
                              make_key(event.get("name"), event.get("tag")))
                with contextlib.suppress(Exception):
                    await self._record(ctx, event, "Error", f"{type(exc).__name__}: {exc}",
                                       traceback="".join(traceback.format_exception(exc)))

    async def _process(self, ctx, event: dict) -> None:
        uuid, name, tag = event["instance_uuid"], event["name"], event.get("tag") or ""
        key = make_key(name, tag)
        fut = None
        current = bool(event.get("operation")) and event["operation"] == self._operations.get(uuid)
        if current:
            fut = self._waiters.get(uuid, {}).get((name, tag))
        if fut is not None and not fut.done():
            details = f"{key} ({event.get('status')}): delivered to the waiting operation"
            delivered = {"name": name, "tag": tag, "status": event.get("status", "completed"),
                         "arrived": time.monotonic(), "source": "bus"}
            taker = fut in self._record_takers
            if taker:  # the waiter writes the record of the delivery with its next conductor call
                delivered["record"] = {"ctx": ctx, "event": event, "result": "Success", "details": details,
                                       "consume": True, "at": utcnow().isoformat()}
            fut.set_result(delivered)
            _observe_delivery(event)
            self._delivered.setdefault(uuid, set()).add((name, tag))
            LOG.info("instance %s: received event %s (%s): the waiting operation is unblocked", uuid, key,
                     event.get("status"))
            if not taker:
                for _ in range(2):  # let the woken waiter run before the bookkeeping below
                    await asyncio.sleep(0)
                await self._record(ctx, event, "Success", details, consume=True)
        elif current and (name, tag) in self._delivered.get(uuid, ()):
            LOG.debug("instance %s: event %s already delivered to its operation", uuid, key)
            await self._record(ctx, event, "Success", f"{key} ({event.get('status')}): already delivered "
                                                      f"to the waiting operation (duplicate)", consume=True)
        elif name == NETWORK_CHANGED:
            details = await self._refresh_vif(ctx, uuid, tag)
            await self._record(ctx, event, "Success", f"{key}: {details}", consume=True)
        elif name == VIF_DELETED:
            details = await self._drop_vif(uuid, tag)
            await self._record(ctx, event, "Success", f"{key}: {details}", consume=True)
        elif name == POWER_UPDATE:
            details = await self.manager.power_update(ctx, uuid, tag)
            await self._record(ctx, event, "Success", f"{key}: {details}", consume=True)
        elif name == VIF_PLUGGED:
            state = await self._state(uuid)
            LOG.warning("instance %s: received unexpected event %s (%s) for instance with %s", uuid, key,
                        event.get("status"), state)
            await self._record(ctx, event, "Success", f"{key} ({event.get('status')}): unexpected, no operation "
                                                      f"waits for it ({state}); kept for a waiter of the "
                                                      f"same operation")
        else:
            LOG.info("instance %s: received event %s (%s); nothing waits for it", uuid, key, event.get("status"))
            await self._record(ctx, event, "Success", f"{key} ({event.get('status')}): nothing waits for it")

    async def _state(self, uuid: str) -> str:
        try:
            inst = await self.manager.conductor.instance_get(None, uuid)
        except exceptions.InstanceNotFound:
            return "instance deleted"
        return f"vm_state {inst['vm_state']} and task_state {inst['task_state']}"

    async def _record(self, ctx, event: dict, result: str, details: str, *, consume: bool = False,
                      traceback: str | None = None) -> None:
        """Record the processing as an event of the action the API recorded it in; consume the inbox row."""
        await self.manager.conductor.event_inbox_record_processing(ctx, event, PROCESS_EVENT, self.host, result,
                                                                   details, consume_event=consume,
                                                                   traceback=traceback)

    def _cache_lock(self, uuid: str) -> asyncio.Lock:
        return self._cache_locks.setdefault(uuid, asyncio.Lock())

    async def _refresh_vif(self, ctx, uuid: str, port_id: str) -> str:
        """``network-changed``: refresh that one port in the network info cache (never all ports)."""
        async with self._cache_lock(uuid):
            try:
                instance = await self.manager.conductor.instance_get(None, uuid)
            except exceptions.InstanceNotFound:
                return "instance deleted"
            cache = list(instance.get("network_info") or [])
            index = next((i for i, vif in enumerate(cache) if vif.get("id") == port_id), None)
            if index is None:
                return "port not in the network info cache; nothing to refresh"
            api = self.manager.network_api
            try:
                port = await api.show_port(ctx, port_id)
            except exceptions.PortNotFound:
                port = None
            if port is None or port.get("device_id") != uuid:
                del cache[index]
                details = "port gone from the instance; removed from the network info cache"
            else:
                old = cache[index]
                vif = await api.port_vif(ctx, port, preserve=bool(old.get("preserve_on_delete")), tag=old.get("tag"))
                cache[index] = vif
                details = "port refreshed in the network info cache"
            await self.manager.conductor.instance_save(None, uuid, {"network_info": cache})
            return details

    async def _drop_vif(self, uuid: str, port_id: str) -> str:
        async with self._cache_lock(uuid):
            try:
                instance = await self.manager.conductor.instance_get(None, uuid)
            except exceptions.InstanceNotFound:
                return "instance deleted"
            cache = [vif for vif in instance.get("network_info") or [] if vif.get("id") != port_id]
            if len(cache) == len(instance.get("network_info") or []):
                return "port not in the network info cache"
            await self.manager.conductor.instance_save(None, uuid, {"network_info": cache})
            return "VIF removed from the network info cache"

    # Spawn, start, hard reboot ---------------------------------------------------------
    def should_wait(self, power_on: bool = True) -> bool:
        return bool(self.manager.driver.supports_paused_start and power_on and self.cfg.vif_plugging_timeout > 0)

    @staticmethod
    def vif_events(network_info: list[dict] | None, replug: bool = False) -> list[tuple[str, str]]:
        """The network-vif-plugged events to wait for, from each port's binding declaration."""
        events = []
        for vif in network_info or []:
            trigger = (vif.get("details") or {}).get(VIF_EVENT_DETAIL, "plug")
            if trigger == "plug" and (replug or not vif.get("active")):
                events.append((VIF_PLUGGED, vif["id"]))
            elif trigger == "bind" and not replug and not vif.get("active"):
                events.append((VIF_PLUGGED, vif["id"]))
        return events

    def _failed_callback(self, event_name: str, instance: dict):
        if self.cfg.vif_plugging_is_fatal:
            raise exceptions.VirtualInterfaceCreateException()
        LOG.warning("instance %s: neutron reported failure on event %s; continuing (vif_plugging_is_fatal "
                    "is False)", instance["uuid"], event_name)

    def _abort_if_deleting(self, uuid: str):
        async def check():
            if await self.manager.conductor.instance_task_state(None, uuid) == states.DELETING:  # or InstanceNotFound
                raise exceptions.UnexpectedDeletingTaskStateError(
                    instance_uuid=uuid, expected="not deleting", actual=states.DELETING)
        return check

    @staticmethod
    def _take_records(futures: dict) -> list[dict]:
        """The delivery records of the events that woke this waiter, for its next conductor call."""
        taken = []
        for fut in futures.values():
            delivered = fut.done() and not fut.cancelled() and fut.exception() is None
            record = fut.result().pop("record", None) if delivered else None
            if record is not None:
                taken.append(record)
        return taken

    async def _wait_around(self, ctx, instance: dict, events: list, body, *, what: str,
                           event_name: str = WAIT_EVENT, progress=None) -> VifWaitResult:
        """Run ``body`` inside a wait for ``events``. The wait's writes ride on ``progress``'s calls
        (the operation's; without one, the wait's own)."""
        uuid = instance["uuid"]
        m = self.manager
        own_progress = progress is None
        if own_progress:
            progress = InstanceProgress(m.conductor, ctx, uuid, m.host)
        wait = _Wait()
        async with self._wait_ending(wait, progress, what):
            async with self.wait_for_instance_event(
                    instance, events, deadline=self.cfg.vif_plugging_timeout, error_callback=self._failed_callback,
                    abort_check=self._abort_if_deleting(uuid), progress=progress, take_records=True) as wait.futures:
                await body()
                wait.event_id = (await progress.send(start_event=event_name))["event_id"]
                wait.started = time.monotonic()
        outcome = wait.outcome
        waited = wait.unblocked - wait.started if wait.started is not None else 0.0
        parts = []
        for key, fut in wait.futures.items():
            if fut.done() and not fut.cancelled():
                got = fut.result()
                parts.append(f"{make_key(*key)} {got['status']} after {max(got['arrived'] - wait.started, 0.0):.3f} s")
            else:
                parts.append(f"{make_key(*key)} missing")
        per_event = "; ".join(parts)
        if outcome is WaitOutcome.OK:
            result, details = "Success", f"{what}: waited {waited:.3f} s for {len(events)} event(s): {per_event}"
        elif outcome is WaitOutcome.FAILED:
            result, details = "Error", f"{what}: a network-vif-plugged event failed after {waited:.3f} s: {per_event}"
        elif self.cfg.vif_plugging_is_fatal:
            result, details = "Error", (f"{what}: timed out after {waited:.3f} s (vif_plugging_timeout "
                                        f"{self.cfg.vif_plugging_timeout:g} s): {per_event}")
        else:
            result, details = "Warning", (f"{what}: timed out after {waited:.3f} s waiting for vif plugging "
                                          f"(vif_plugging_is_fatal is False, continuing): {per_event}")
        metrics.VIF_WAIT.labels(outcome.value).observe(waited)
        WAIT_METRICS[m.host].append({
            "host": m.host, "at": time.time(),
            "instance": uuid, "what": what, "seconds": waited, "result": outcome.value,
            "unblocked_at": wait.unblocked,
            "events": {make_key(*key): fut.result()["arrived"] for key, fut in wait.futures.items()
                       if fut.done() and not fut.cancelled()}})
        (LOG.info if outcome is WaitOutcome.OK else LOG.warning)("instance %s: %s", uuid, details)
        await progress.finish(wait.event_id, result=result, details=details,
                              traceback="".join(traceback.format_exception(wait.error)) if wait.error else None)
        await self._write_records(progress, wait.records)  # after the wait's finish, as the event's handler wrote it
        if own_progress or outcome is not WaitOutcome.OK:
            await progress.flush()
        return VifWaitResult(outcome=outcome, seconds=waited,
                             fatal=outcome is not WaitOutcome.OK and self.cfg.vif_plugging_is_fatal)

    @contextlib.asynccontextmanager
    async def _wait_ending(self, wait: _Wait, progress, what: str):
        """How the wait of the body ended, noted on ``wait``: with every event (OK), past
        ``vif_plugging_timeout`` (TIMEOUT) or with a failed event that ``vif_plugging_is_fatal``
        makes an error (FAILED); the delivery records taken in each case. Anything else aborts the
        wait: its records and the aborted wait are written, and the exception goes on."""
        try:
            try:
                yield wait
            finally:
                wait.records = self._take_records(wait.futures)
                wait.unblocked = time.monotonic()
        except asyncio.TimeoutError as exc:
            wait.outcome, wait.error = WaitOutcome.TIMEOUT, exc
        except exceptions.VirtualInterfaceCreateException as exc:
            wait.outcome, wait.error = WaitOutcome.FAILED, exc
        except BaseException:
            await self._write_records(progress, wait.records)
            if wait.started is not None:
                await progress.finish(wait.event_id, result="Error", details=f"{what}: aborted")
            await progress.flush()
            raise

    @staticmethod
    async def _write_records(progress, records: list[dict]) -> None:
        for record in records:
            await progress.processed(record["ctx"], record["event"], PROCESS_EVENT, record["result"],
                                     record["details"], consume_event=record["consume"],
                                     processed_at=record["at"])

    async def wait_around(self, ctx, instance: dict, events: list, body, *, what: str,
                          event_name: str = WAIT_EVENT) -> VifWaitResult:
        """Run ``body()`` inside a wait for ``events`` (``vif_plugging_timeout``), recorded as every
        wait is (as the action event ``event_name``). The caller carries on unless the result is
        ``fatal`` (timed out or failed with ``vif_plugging_is_fatal``): then it undoes what ``body``
        did."""
        return await self._wait_around(ctx, instance, events, body, what=what, event_name=event_name)

    def network_info_lock(self, uuid: str) -> asyncio.Lock:
        """The lock every change of the instance's network info cache on this host holds."""
        return self._cache_lock(uuid)

    async def plug_and_wait(self, ctx, instance: dict, events: list, plug, *, what: str, progress=None) -> None:
        """Run ``plug()`` (a paused start, or a re-plug) inside a wait for ``events``. When the wait
        ends fatally (``vif_plugging_is_fatal``) the guest is powered off and
        VirtualInterfaceCreateException raised; otherwise the caller carries on (and resumes)."""
        if (await self._wait_around(ctx, instance, events, plug, what=what, progress=progress)).fatal:
            with contextlib.suppress(Exception):
                await self.manager.driver.power_off(instance)
            raise exceptions.VirtualInterfaceCreateException()

    async def spawn(self, ctx, instance: dict, image_meta: dict, network_info: list[dict],
                    block_device_info: dict | None, progress: InstanceProgress | None = None) -> None:
        """A spawn (a build's, an unshelve's): paused until the VIFs are plugged (or as the config
        says); its writes ride on the operation's ``progress`` (without one, its own, written
        before it returns)."""
        if progress is None:
            progress = InstanceProgress(self.manager.conductor, ctx, instance["uuid"], self.manager.host)
            try:
                await self.spawn(ctx, instance, image_meta, network_info, block_device_info, progress)
            finally:
                await progress.flush()
            return
        m = self.manager
        uuid = instance["uuid"]

        async def do_spawn(paused: bool):
            async with progress.step("compute_spawn"):
                kwargs = {"paused": True} if paused else {}
                await m.driver.spawn(ctx, instance, image_meta, network_info, block_device_info,
                                     power_on=True, **kwargs)

        try:
            await self.start_paused(ctx, instance, network_info, do_spawn, what="spawn", progress=progress)
        except exceptions.VirtualInterfaceCreateException as cause:
            raise exceptions.BuildAbortException(
                instance_uuid=uuid,
                reason=f"VirtualInterfaceCreateException: {cause} (no network-vif-plugged within "
                       f"vif_plugging_timeout), not rescheduling.") from cause

    async def start_paused(self, ctx, instance: dict, network_info: list[dict], make, *, what: str,
                           power_on: bool = True, replug: bool = False, progress=None) -> None:
        """``make(paused)`` creates the guest (a spawn's, a resize's or its revert's): when it is to
        run and there are network-vif-plugged events of ``network_info`` to wait for (``replug``: of
        every VIF, as they are plugged again on another host), paused, resumed once the wait lets it
        go on (``plug_and_wait``); otherwise as ``power_on`` says, at once."""
        events = self.vif_events(network_info, replug=replug) if self.should_wait(power_on) else []
        if not events:
            await make(False)
            return
        await self.plug_and_wait(ctx, instance, events, lambda: make(True), what=what, progress=progress)
        await self.manager.driver.unpause(instance)

    async def replug(self, ctx, instance: dict, driver_call, *, what: str) -> None:
        """Start / hard reboot: ``driver_call(network_info)`` re-plugs the VIFs; wait for them."""
        if not self.should_wait(power_on=True):
            await driver_call(instance.get("network_info") or [])
            return
        uuid = instance["uuid"]
        await self.begin_operation(uuid)
        network_info = instance.get("network_info") or []
        try:  # the binding's declaration now, not the cache's
            fresh = await self.manager.network_api.get_instance_nw_info(ctx, instance)
        except Exception as exc:
            LOG.warning("instance %s: cannot refresh the network info (%s); using the cache", uuid, exc)
        else:
            if fresh != network_info:
                async with self._cache_lock(uuid):
                    await self.manager.conductor.instance_save(None, uuid, {"network_info": fresh})
            network_info = fresh
        events = self.vif_events(network_info, replug=True)
        if not events:
            await driver_call(network_info)
            return
        await self.plug_and_wait(ctx, instance, events, lambda: driver_call(network_info), what=what)
