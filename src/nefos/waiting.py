"""Waiting for an event with a time limit, without losing a cancellation; trying again.

On Python 3.11, ``asyncio.wait_for`` returns normally when the task is cancelled just as the
awaited event is set (fixed in 3.12): a loop built on it can swallow the cancellation that
should stop it, and whoever stops it waits for ever. ``asyncio.timeout`` has no such gap.

Every retry goes through ``retrying`` (tenacity): which errors run the operation again, the waits
between attempts and how many there may be are its arguments, so a loop that tries again is never
written by hand::

    async for attempt in retrying(retry=retry_if_exception_type(ServiceUnavailable), wait=wait_fixed(2)):
        with attempt:
            return await ask()
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, stop_never, wait_exponential


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


async def _sleep(seconds: float) -> None:
    # asyncio.sleep looked up at each pause: a test may record the pauses instead of sleeping them.
    await asyncio.sleep(seconds)


def retrying(*, retry: Callable[[RetryCallState], bool], wait: Callable[[RetryCallState], float],
             attempts: int | None = None, stop: Callable[[RetryCallState], bool] | None = None,
             before_sleep: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    """Attempts of an operation that may simply run again: again while ``retry`` accepts the error,
    after the pause ``wait`` says, at most ``attempts`` times (or until ``stop`` says so; neither:
    until it succeeds or is cancelled); ``before_sleep`` is told of each failure that will be tried
    again. The last error is raised as itself, never as tenacity's RetryError, and a cancellation
    is never tried again (it is no ``Exception``)."""
    if stop is None:
        stop = stop_never if attempts is None else stop_after_attempt(attempts)

    def errors_only(state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
        return (error is None or isinstance(error, Exception)) and retry(state)
    return AsyncRetrying(retry=errors_only, wait=wait, stop=stop, before_sleep=before_sleep, reraise=True,
                         sleep=_sleep)


def until_reachable(what: str, retry, log: logging.Logger) -> AsyncRetrying:
    """Attempts for a starting service to reach ``what`` (its broker, its database), for as long as
    it is away: waits of 1 s doubling up to 30 s (oslo.messaging's rabbit_retry_interval,
    rabbit_retry_backoff and rabbit_interval_max; oslo.db retries at start alike), each failure that
    ``retry`` accepts logged as "<what> unreachable". Cancel the loop to give up (a SIGTERM)."""
    def unreachable(state: RetryCallState) -> None:
        log.error("%s unreachable (%s); trying again in %.0f s", what, state.outcome.exception(),
                  state.next_action.sleep)
    return retrying(retry=retry, wait=wait_exponential(multiplier=1, min=1, max=30), before_sleep=unreachable)
