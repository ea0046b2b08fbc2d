"""Waiting for an event with a time limit, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` returns normally when the task is cancelled just as the
awaited event is set (fixed in 3.12): a loop built on it can swallow the cancellation that
should stop it, and whoever stops it waits for ever. ``asyncio.timeout`` has no such gap.
"""

from __future__ import annotations

import asyncio


async def event_set_within(event: asyncio.Event, timeout: float) -> bool:
    """True when ``event`` is (or becomes) set within ``timeout`` seconds."""
    try:
        async with asyncio.timeout(max(timeout, 0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
