"""The in-process transport: asyncio tasks, no broker (the all-in-one default)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import defaultdict

from nefos.bus.base import (
    Bus, Endpoint, NotificationCallback, decode, dispatch, encode, error_payload, make_message,
    check_notification_payload, check_served, notification_envelope, raise_remote, target,
)

LOG = logging.getLogger(__name__)


class LocalBus(Bus):
    def __init__(self):
        self._servers: dict[str, list[Endpoint]] = defaultdict(list)
        self._fanout: dict[str, list[Endpoint]] = defaultdict(list)
        self._rr: dict[str, itertools.count] = defaultdict(itertools.count)
        self._listeners: list[NotificationCallback] = []
        self._tasks: set[asyncio.Task] = set()
        self._running = False

    async def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._servers.clear()
        self._fanout.clear()
        self._listeners.clear()

    async def serve(self, topic: str, endpoint: Endpoint, host: str | None = None) -> None:
        check_served(topic, endpoint)
        self._servers[topic].append(endpoint)
        if host:
            self._servers[target(topic, host)].append(endpoint)
        self._fanout[topic].append(endpoint)

    async def unserve(self, endpoint: Endpoint) -> None:
        for table in (self._servers, self._fanout):
            for endpoints in table.values():
                while endpoint in endpoints:
                    endpoints.remove(endpoint)

    def _pick(self, name: str) -> Endpoint:
        servers = self._servers.get(name)
        if not servers:
            from nefos.exceptions import NoServerListening
            raise NoServerListening(target=name)
        return servers[next(self._rr[name]) % len(servers)]

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, endpoint: Endpoint, wire: bytes, *, answered: bool = False) -> bytes:
        try:
            result = await dispatch(endpoint, decode(wire), answered=answered)
            return encode({"result": result})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every error goes back to the caller
            return encode({"error": error_payload(exc)})

    async def call(self, ctx, topic, method, *, host=None, timeout=None, version=None, **kwargs):
        wire = encode(make_message(ctx, method, kwargs, version))
        endpoint = self._pick(target(topic, host))
        task = self._spawn(self._run(endpoint, wire, answered=True))
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the caller's
            # cancellation when the reply lands at the same moment (see nefos.waiting).
            async with asyncio.timeout(timeout or self.default_timeout):
                reply = await asyncio.shield(task)
        except TimeoutError:
            from nefos.exceptions import ServiceUnavailable
            raise ServiceUnavailable(f"timed out waiting for {method} on {target(topic, host)}")
        reply = decode(reply)
        if "error" in reply:
            raise_remote(reply["error"])
        return reply["result"]

    async def _run_logged(self, endpoint: Endpoint, wire: bytes, name: str) -> None:
        reply = decode(await self._run(endpoint, wire))
        if "error" in reply:
            LOG.error("cast %s failed: %s", name, reply["error"]["traceback"])

    async def cast(self, ctx, topic, method, *, host=None, version=None, **kwargs) -> None:
        wire = encode(make_message(ctx, method, kwargs, version))
        endpoint = self._pick(target(topic, host))
        self._spawn(self._run_logged(endpoint, wire, f"{target(topic, host)}.{method}"))

    async def fanout(self, ctx, topic, method, *, version=None, **kwargs) -> None:
        wire = encode(make_message(ctx, method, kwargs, version))
        for endpoint in list(self._fanout.get(topic, [])):
            self._spawn(self._run_logged(endpoint, wire, f"{topic}(fanout).{method}"))

    async def notify(self, ctx, event_type, payload, *, publisher_id, priority="INFO") -> None:
        if not self._listeners:
            check_notification_payload(payload)  # refused all the same (the envelope checks it too)
            return
        wire = encode(notification_envelope(ctx, event_type, payload, publisher_id, priority))
        for callback in list(self._listeners):
            self._spawn(self._deliver(callback, wire))

    async def _deliver(self, callback: NotificationCallback, wire: bytes) -> None:
        try:
            await callback(decode(wire))
        except Exception:
            LOG.exception("notification listener failed")

    async def listen_notifications(self, callback: NotificationCallback) -> None:
        self._listeners.append(callback)
