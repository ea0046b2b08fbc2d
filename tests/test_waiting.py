"""Stopping a task that swallows its cancellation (as asyncio.wait_for can on Python 3.11) still ends it."""

import asyncio, pytest
from nefos.waiting import cancel_and_wait

async def test_a_task_that_swallows_its_cancellation_is_cancelled_again():
    swallowed = []
    async def stubborn():
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if not swallowed:  # as wait_for on 3.11 may: the first cancellation is lost
                    swallowed.append(1)
                    continue
                raise
    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(10):
        await cancel_and_wait(task, None)
    assert task.cancelled() and swallowed == [1]
