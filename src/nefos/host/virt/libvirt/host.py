"""The compute host's connection to libvirt (Nova's ``nova.virt.libvirt.host.Host``, asyncio style).

* Blocking libvirt calls run in worker threads (``asyncio.to_thread``);
  libvirt's own events arrive through ``libvirtaio`` on the process's libvirt
  event loop (``events.ensure_event_loop``) and are handed to the service's
  loop.
* ``connect`` opens the connection, registers the lifecycle callback and the
  close callback, and sets a keepalive, so a dead libvirtd is noticed within
  seconds even when nothing is being asked of it.
* When the connection closes (libvirtd stopped, or a call finds it broken)
  ``on_connection(False, reason)`` is called once and a reconnect task retries
  with backoff (0.5 s doubling to ``RECONNECT_MAX``); once connected again,
  ``on_connection(True, "")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Callable

from nefos import exceptions
from nefos.host.virt.libvirt import events

LOG = logging.getLogger(__name__)

RECONNECT_FIRST = 0.5
RECONNECT_MAX = 5.0
KEEPALIVE_INTERVAL = 2  # seconds between keepalive probes
KEEPALIVE_COUNT = 3  # unanswered probes before the connection is closed

CLOSE_REASONS = {0: "error", 1: "end of file from libvirtd", 2: "keepalive timeout", 3: "client closed"}


def libvirt_module():
    try:
        import libvirt
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise exceptions.HypervisorUnavailable(
            "libvirt-python is not installed (pip install 'nefos[libvirt]')") from exc
    return libvirt


def is_connection_error(exc: BaseException) -> bool:
    """Whether a libvirtError means the connection itself is broken."""
    libvirt = libvirt_module()
    if not isinstance(exc, libvirt.libvirtError):
        return False
    return (exc.get_error_code() in (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_ERR_INTERNAL_ERROR,
                                     libvirt.VIR_ERR_RPC, libvirt.VIR_ERR_NO_CONNECT,
                                     libvirt.VIR_ERR_INVALID_CONN)
            and exc.get_error_domain() in (libvirt.VIR_FROM_REMOTE, libvirt.VIR_FROM_RPC,
                                           libvirt.VIR_FROM_NONE)) or \
        exc.get_error_code() in (libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_INVALID_CONN)


class Host:
    def __init__(self, uri: str, host: str, *,
                 on_lifecycle: Callable[[str, int, int], None],
                 on_connection: Callable[[bool, str], None]):
        self.uri = uri
        self.host = host
        self._on_lifecycle = on_lifecycle  # (uuid, libvirt event, detail), on the service's loop
        self._on_connection = on_connection  # (connected, reason), on the service's loop
        self._conn = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reconnect_task: asyncio.Task | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._generation = 0  # bumped per connection: a late close callback of an old one is ignored
        self._closing = False
        self.connected = False
        self.last_error = ""

    # Connection ----------------------------------------------------------------------------
    async def connect(self) -> bool:
        """Open the connection (idempotent); False (and a reconnect under way) if libvirtd is not there."""
        self._loop = asyncio.get_running_loop()
        self._closing = False
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._conn is not None:
                return True
            try:
                await self._open()
            except Exception as exc:
                self.last_error = f"Failed to connect to libvirt at {self.uri}: {_msg(exc)}"
                LOG.warning("%s", self.last_error)
                self._set_connected(False, self.last_error)
                self._start_reconnect()
                return False
        self._set_connected(True, "")
        return True

    async def _open(self) -> None:
        libvirt = libvirt_module()
        events.ensure_event_loop()
        conn = await asyncio.to_thread(libvirt.open, self.uri)
        self._generation += 1
        generation = self._generation
        try:
            conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                        self._lifecycle_callback, generation)
            conn.registerCloseCallback(self._close_callback, generation)
            await asyncio.to_thread(conn.setKeepAlive, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
        except Exception:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        self._conn = conn
        LOG.info("connected to libvirt at %s (host %s)", self.uri, self.host)

    def _set_connected(self, connected: bool, reason: str) -> None:
        if connected == self.connected and connected:
            return
        self.connected = connected
        try:
            self._on_connection(connected, reason)
        except Exception:
            LOG.exception("connection listener failed")

    async def close(self) -> None:
        """Stop reconnecting and close the connection (the host is shutting down)."""
        self._closing = True
        task, self._reconnect_task = self._reconnect_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        conn, self._conn = self._conn, None
        self.connected = False
        if conn is not None:
            self._generation += 1
            await asyncio.to_thread(_close_quietly, conn)

    def get_connection(self):
        """The open connection; ``HypervisorUnavailable`` while there is none."""
        conn = self._conn
        if conn is None:
            raise exceptions.HypervisorUnavailable(host=self.host)
        return conn

    async def call(self, fn, *args):
        """Run a blocking libvirt call in a worker thread; a broken connection -> HypervisorUnavailable."""
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception as exc:
            if is_connection_error(exc):
                self.connection_broken(_msg(exc))
                raise exceptions.HypervisorUnavailable(host=self.host) from exc
            raise

    def connection_broken(self, reason: str) -> None:
        """Forget the connection, report it, reconnect (on the service's loop)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _on_thread_of(loop):
            self._broken(self._generation, reason)
        else:
            loop.call_soon_threadsafe(self._broken, self._generation, reason)

    # libvirt callbacks (on the libvirt event thread) ------------------------------------------
    def _lifecycle_callback(self, conn, dom, event, detail, generation) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or generation != self._generation:
            return
        try:
            uuid = dom.UUIDString()
        except Exception:
            return
        loop.call_soon_threadsafe(self._on_lifecycle, uuid, event, detail)

    def _close_callback(self, conn, reason, generation) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        text = f"Connection to libvirt lost: {CLOSE_REASONS.get(reason, reason)}"
        loop.call_soon_threadsafe(self._broken, generation, text)

    # On the service's loop ------------------------------------------------------------------
    def _broken(self, generation: int, reason: str) -> None:
        if self._closing or generation != self._generation or self._conn is None:
            return
        LOG.error("libvirt connection to %s is broken: %s", self.uri, reason)
        conn, self._conn = self._conn, None
        self._generation += 1
        self.last_error = reason
        threading.Thread(target=_close_quietly, args=(conn,), daemon=True).start()
        self._set_connected(False, reason)
        self._start_reconnect()

    def _start_reconnect(self) -> None:
        if self._closing or (self._reconnect_task is not None and not self._reconnect_task.done()):
            return
        self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect(),
                                                                     name=f"libvirt-reconnect:{self.host}")

    async def _reconnect(self) -> None:
        delay = RECONNECT_FIRST
        while not self._closing:
            await asyncio.sleep(delay)
            try:
                async with self._connect_lock:
                    if self._conn is None:
                        await self._open()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.debug("reconnecting to libvirt at %s failed: %s", self.uri, _msg(exc))
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            LOG.info("libvirt connection to %s restored", self.uri)
            self._set_connected(True, "")
            return


def _close_quietly(conn) -> None:
    with contextlib.suppress(Exception):
        conn.unregisterCloseCallback()
    with contextlib.suppress(Exception):
        conn.close()


def _on_thread_of(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _msg(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__
