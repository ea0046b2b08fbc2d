"""Waiting in tests for a condition rather than for a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import time


async def eventually(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Wait until ``predicate()`` (awaited when it is a coroutine) is truthy; return its value.
    AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)
