"""Waiting for an event with a time limit, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` returns normally when the task is cancelled just as the
awaited event is set (fixed in 3.12): a loop built on it can swallow the cancellation that
should stop it, and whoever stops it waits for ever. ``asyncio.timeout`` has no such gap.
"""

from __future__ import annotations

import asyncio
import logging

from tenacity import AsyncRetrying, RetryCallState, wait_exponential


async def event_set_within(event: asyncio.Event, timeout: float) -> bool:
    """True when ``event`` is (or becomes) set within ``timeout`` seconds."""
    try:
        async with asyncio.timeout(max(timeout, 0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again any that swallowed the
    cancellation (a library's wait_for on 3.11 can) instead of waiting for it for ever."""
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=1.0)
    for task in tasks:  # what they ended with is theirs to log, not "never retrieved"
        if task is not None and not task.cancelled():
            task.exception()


def until_reachable(what: str, retry, log: logging.Logger) -> AsyncRetrying:
    """Attempts for a starting service to reach ``what`` (its broker, its database), for as long as
    it is away: waits of 1 s doubling up to 30 s (oslo.messaging's rabbit_retry_interval,
    rabbit_retry_backoff and rabbit_interval_max; oslo.db retries at start alike), each failure that
    ``retry`` accepts logged as "<what> unreachable". Cancel the loop to give up (a SIGTERM)."""
    def unreachable(state: RetryCallState) -> None:
        log.error("%s unreachable (%s); trying again in %.0f s", what, state.outcome.exception(),
                  state.next_action.sleep)
    return AsyncRetrying(retry=retry, wait=wait_exponential(multiplier=1, min=1, max=30),
                         before_sleep=unreachable, reraise=True)
