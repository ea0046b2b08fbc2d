"""A byte relay for tests: each connection it accepts is carried to an upstream it opens.

It runs its own event loop in a thread of the test process, so a test's blocking calls (a
command, a libvirt call on the test's loop) never stall the traffic it carries.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Callable

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class Relay:
    """Servers started with ``serve`` carry each connection to ``open_upstream()``; a connection
    the upstream refuses is closed. ``cut`` closes the servers and every connection they carry."""

    def __init__(self, open_upstream: Callable[[], Awaitable[Streams]], name: str = "relay"):
        self._open_upstream = open_upstream
        self._servers: list[asyncio.AbstractServer] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro, timeout: float = 30):
        """Run ``coro`` on the relay's loop, from any thread; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def serve(self, start_server: Callable[..., Awaitable[asyncio.AbstractServer]], **kwargs) -> None:
        """On the relay's loop: ``start_server(carry, **kwargs)`` (``asyncio.start_server`` or
        ``asyncio.start_unix_server``), kept until ``cut``."""
        self._servers.append(await start_server(self._carry, **kwargs))

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._open_upstream()
        except OSError:
            writer.close()
            return
        pair = {writer, up_writer}
        self._writers |= pair
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        self._writers -= pair

    async def _cut(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        for server in servers:
            await server.wait_closed()

    def cut(self) -> None:
        self.call(self._cut())

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
