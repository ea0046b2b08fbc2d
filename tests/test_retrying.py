"""The one retry helper, ``nefos.waiting.retrying``: an operation runs again only for the errors its
caller names, at most the attempts it allows, with the waits it asks for; the last error comes out
as itself, and a cancellation is never retried."""

import asyncio

import pytest
from tenacity import retry_if_exception_type, wait_exponential, wait_fixed

from nefos.waiting import retrying


class Flaky:
    def __init__(self, failures: int, error: type[BaseException] = ConnectionError):
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "done"


async def run(operation, **kwargs):
    async for attempt in retrying(**kwargs):
        with attempt:
            return await operation()


async def test_an_operation_that_recovers_is_answered_after_its_failures():
    flaky, told = Flaky(2), []
    result = await run(flaky, retry=retry_if_exception_type(ConnectionError), wait=wait_fixed(0),
                       before_sleep=lambda state: told.append(state.attempt_number))
    assert result == "done" and flaky.calls == 3 and told == [1, 2]


async def test_the_last_error_comes_out_as_itself_once_the_attempts_are_spent():
    flaky = Flaky(10)
    with pytest.raises(ConnectionError, match="failure 3"):
        await run(flaky, retry=retry_if_exception_type(ConnectionError), wait=wait_fixed(0), attempts=3)
    assert flaky.calls == 3


async def test_an_error_the_caller_does_not_name_is_raised_at_once():
    flaky = Flaky(1, KeyError)
    with pytest.raises(KeyError):
        await run(flaky, retry=retry_if_exception_type(ConnectionError), wait=wait_fixed(0))
    assert flaky.calls == 1


async def test_a_cancellation_is_never_retried_even_when_every_error_is():
    flaky = Flaky(1, asyncio.CancelledError)
    with pytest.raises(asyncio.CancelledError):
        await run(flaky, retry=lambda state: True, wait=wait_fixed(0))
    assert flaky.calls == 1


async def test_the_pauses_are_the_ones_asked_for(monkeypatch):
    from nefos import waiting
    pauses = []

    class Recording:
        def __getattr__(self, name):
            return getattr(asyncio, name)

        @staticmethod
        async def sleep(seconds):
            pauses.append(seconds)
    monkeypatch.setattr(waiting, "asyncio", Recording())
    flaky = Flaky(5)
    await run(flaky, retry=retry_if_exception_type(ConnectionError), wait=wait_exponential(multiplier=1, max=5))
    assert pauses == [1, 2, 4, 5, 5]
