"""Events a driver emits: Event, InstanceEvent, LifecycleEvent about its guests,
ConnectionEvent about its connection to the hypervisor."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nefos.model import states

EVENT_LIFECYCLE_STARTED = 0
EVENT_LIFECYCLE_STOPPED = 1
EVENT_LIFECYCLE_PAUSED = 2
EVENT_LIFECYCLE_RESUMED = 3
EVENT_LIFECYCLE_SUSPENDED = 4

NAMES = {
    EVENT_LIFECYCLE_STARTED: "Started",
    EVENT_LIFECYCLE_STOPPED: "Stopped",
    EVENT_LIFECYCLE_PAUSED: "Paused",
    EVENT_LIFECYCLE_RESUMED: "Resumed",
    EVENT_LIFECYCLE_SUSPENDED: "Suspended",
}

# The power states a guest can be in right after each transition. A handler that reads
# another state from the driver is looking at a later change, which has its own event.
POWER_STATES_AFTER = {
    EVENT_LIFECYCLE_STARTED: frozenset({states.RUNNING}),
    EVENT_LIFECYCLE_RESUMED: frozenset({states.RUNNING}),
    EVENT_LIFECYCLE_STOPPED: frozenset({states.SHUTDOWN, states.CRASHED, states.NOSTATE}),
}


@dataclass
class Event:
    timestamp: float = field(default_factory=time.time)


@dataclass
class InstanceEvent(Event):
    uuid: str = ""


@dataclass
class LifecycleEvent(InstanceEvent):
    transition: int = EVENT_LIFECYCLE_STARTED
    # A Stopped the hypervisor says may be followed by a start of the same guest (libvirt: stopped
    # for a migration or to restore a snapshot).
    may_restart: bool = False

    @property
    def name(self) -> str:
        return NAMES.get(self.transition, "Unknown")

    @property
    def power_states_after(self) -> frozenset | None:
        """Readings consistent with this event; None when any reading is."""
        return POWER_STATES_AFTER.get(self.transition)


@dataclass
class ConnectionEvent(Event):
    """The driver lost (``connected=False``, with a ``reason``) or (re)gained its hypervisor connection.

    Drivers emit one whenever the connection changes and once when they
    connect in ``init_host``; the compute host disables its own service while
    the connection is down (as Nova).
    """

    connected: bool = True
    reason: str = ""
