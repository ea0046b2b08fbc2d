"""The compute host's listener for its driver's events.

The manager registers ``LifecycleEventHandler.on_event`` with the driver
before its first hypervisor call and unregisters it before shutting down
(so stopping a host never records its guests as stopped). ``on_event`` only
schedules work: it never blocks the driver.

Lifecycle events: events about guests this host does not own are ignored.
A STOPPED event that a start may follow is held for ``lifecycle_stopped_delay``
seconds and dropped when any later event about the same guest arrives (a hard
reboot is STOPPED then STARTED: no spurious SHUTOFF): one that comes while an
operation of this host's own holds the instance (a reboot, resize, rebuild, a
start), or one the hypervisor says a start may follow (libvirt: stopped for a
migration or a snapshot restore). Any other STOPPED (an out-of-band destroy, a
poweroff from inside the guest, a crash) is acted on at once, so the default
delay (Nova's 15 s) costs nothing when nothing is in flight. The event itself
is only a hint: the handler
re-reads the driver's power state under the instance's lock and applies the
same per-instance sync as the periodic task
(``nefos.host.compute.power_sync.sync_instance_power_state``), which does nothing
while the instance has a task_state. A reading the event cannot have led to
(a Started event handled after the guest stopped again) is skipped: that later
change has its own event, so a delayed handler never acts on it twice. ``handle_virt_lifecycle_events = False``
leaves guests to the periodic sync alone.

Connection events: on loss the host disables its own compute service
("AUTO: <reason>"), on recovery it re-enables it unless an operator disabled
it (``nefos.objects.service_rows``, through the conductor).
"""

from __future__ import annotations

import asyncio
import logging

from nefos.host.compute import power_sync
from nefos.host.virt import event as virtevent

LOG = logging.getLogger(__name__)


class LifecycleEventHandler:
    def __init__(self, manager):
        self.manager = manager
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._held: dict[str, asyncio.TimerHandle] = {}  # held STOPPED events, by instance uuid
        self._tasks: set[asyncio.Task] = set()
        # The newest event of each instance whose handler has not started yet (it waits for the
        # instance's lock, e.g. behind the build that emitted it).
        self._pending: dict[str, virtevent.LifecycleEvent] = {}
        self._connection: tuple[bool, str] | None = None  # the driver's last report
        self._connection_lock = asyncio.Lock()

    @property
    def cfg(self):
        return self.manager.rt.cfg

    # Registration ----------------------------------------------------------------
    def start(self) -> None:
        """Listen to the driver; call before any hypervisor call."""
        self._loop = asyncio.get_running_loop()
        self._running = True
        self.manager.driver.register_event_listener(self.on_event)

    async def stop(self) -> None:
        """Stop listening, drop held events, cancel the handling under way."""
        self.manager.driver.register_event_listener(None)
        self._running = False
        for handle in self._held.values():
            handle.cancel()
        self._held.clear()
        self._pending.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # The driver's callback -----------------------------------------------------------
    def on_event(self, event: virtevent.Event) -> None:
        """Called by ``driver.emit_event``, from the loop or from a driver thread; never blocks."""
        loop = self._loop
        if loop is None or not self._running or loop.is_closed():
            return
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            self._dispatch(event)
        else:
            loop.call_soon_threadsafe(self._dispatch, event)

    def _dispatch(self, event: virtevent.Event) -> None:
        if not self._running:
            return
        if isinstance(event, virtevent.ConnectionEvent):
            self._connection = (event.connected, event.reason)
            self._spawn(self.apply_connection_state())
        elif isinstance(event, virtevent.LifecycleEvent):
            self._lifecycle(event)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Lifecycle events ----------------------------------------------------------------
    def _lifecycle(self, event: virtevent.LifecycleEvent) -> None:
        if not self.cfg.handle_virt_lifecycle_events or not event.uuid:
            return
        held = self._held.pop(event.uuid, None)
        if held is not None:
            held.cancel()  # a later event about the guest supersedes a held STOPPED
            LOG.debug("instance %s: dropped a held Stopped event (%s followed)", event.uuid, event.name)
        delay = self.cfg.lifecycle_stopped_delay
        if (event.transition == virtevent.EVENT_LIFECYCLE_STOPPED and delay > 0
                and (event.may_restart or self.manager.operation_in_progress(event.uuid))):
            self._held[event.uuid] = asyncio.get_running_loop().call_later(delay, self._release, event)
            return
        self._queue(event)

    def _release(self, event: virtevent.LifecycleEvent) -> None:
        self._held.pop(event.uuid, None)
        if self._running:
            self._queue(event)

    def _queue(self, event: virtevent.LifecycleEvent) -> None:
        """Handle ``event``; a handler of the instance that has not started takes it instead of its
        older event: the handler reads the guest as it is when it runs, so the older event (a
        paused spawn's, behind the build's resume) has nothing more to tell."""
        waiting = event.uuid in self._pending
        self._pending[event.uuid] = event
        if not waiting:
            self._spawn(self._handle(event.uuid))

    async def _handle(self, uuid: str) -> None:
        try:
            async with self.manager.instance_lock(uuid, operation=False):
                pass  # what holds the instance (the operation that emitted the event) is done
        finally:
            event = self._pending.pop(uuid, None)  # (None: stopped meanwhile)
        if event is None:
            return
        try:
            await power_sync.sync_instance_power_state(self.manager, event.uuid,
                                                       source=f"lifecycle event {event.name}",
                                                       only_if=event.power_states_after)
        except asyncio.CancelledError:
            raise
        except Exception:
            LOG.exception("instance %s: handling lifecycle event %s failed", event.uuid, event.name)

    # Connection events ---------------------------------------------------------------
    def connection_seen(self, connected: bool, reason: str | None = None) -> None:
        """What init_host learnt of the connection, unless the driver has reported since."""
        if self._connection is None:
            self._connection = (connected, reason)

    async def apply_connection_state(self) -> None:
        """Make the service row follow the driver's last connection report (ordered, idempotent)."""
        async with self._connection_lock:
            if self._connection is None:
                return
            connected, reason = self._connection
            try:
                await self.manager.conductor.service_record_hypervisor_connection(None, self.manager.host, connected,
                                                                                  reason)
                await self.manager.conductor.service_set_host_enabled(
                    None, self.manager.host,
                    connected, reason or "Connection to the hypervisor is broken")
            except asyncio.CancelledError:
                raise
            except Exception:
                LOG.exception("cannot update the compute service status of %s", self.manager.host)
