"""libvirt's event loop for the process: ``libvirtaio`` on a dedicated asyncio loop.

libvirt accepts one event-loop implementation per process and for the life of
the process (``virEventRegisterImpl`` refuses a second one), while a Nefos
process may run several asyncio loops one after the other (the test suite
does). So the implementation is registered once, on an asyncio loop of its
own that runs in a daemon thread (``libvirt-events``); drivers hand what they
hear to their own loop with ``call_soon_threadsafe``.

libvirt calls the implementation's add/update/remove callbacks from whichever
thread makes a libvirt call — here the worker threads of ``asyncio.to_thread``
that keep blocking libvirt calls off the service's loop. ``libvirtaio``
touches its loop directly (``add_reader``, ``create_task``), which asyncio
only allows from the loop's own thread, so it is given ``_ThreadSafeLoop``, a
view of the loop that runs those calls on the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


class _DeferredTask:
    """A task created from a foreign thread: created on the loop's thread; cancel() is forwarded."""

    _source_traceback = None

    def __init__(self, loop: asyncio.AbstractEventLoop, coro):
        self._loop = loop
        self._task: asyncio.Task | None = None
        self._cancelled = False
        self._lock = threading.Lock()
        loop.call_soon_threadsafe(self._start, coro)

    def _start(self, coro) -> None:
        with self._lock:
            if self._cancelled:
                coro.close()
                return
            self._task = self._loop.create_task(coro)

    def cancel(self, msg=None) -> bool:
        with self._lock:
            self._cancelled = True
            task = self._task
        if task is not None:
            self._loop.call_soon_threadsafe(task.cancel)
        return True

    def done(self) -> bool:
        return self._task.done() if self._task is not None else self._cancelled


class _ThreadSafeLoop:
    """The parts of an event loop libvirtaio uses, safe to call from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread_id: int):
        self._loop = loop
        self._thread_id = thread_id

    def __getattr__(self, name):
        return getattr(self._loop, name)

    def _on_loop(self) -> bool:
        return threading.get_ident() == self._thread_id

    def _run(self, fn, *args):
        if self._on_loop():
            return fn(*args)
        self._loop.call_soon_threadsafe(fn, *args)
        return None

    def add_reader(self, fd, callback, *args):
        return self._run(self._loop.add_reader, fd, callback, *args)

    def remove_reader(self, fd):
        return self._run(self._loop.remove_reader, fd)

    def add_writer(self, fd, callback, *args):
        return self._run(self._loop.add_writer, fd, callback, *args)

    def remove_writer(self, fd):
        return self._run(self._loop.remove_writer, fd)

    def create_task(self, coro, **kwargs):
        if self._on_loop():
            return self._loop.create_task(coro, **kwargs)
        return _DeferredTask(self._loop, coro)

    def call_soon(self, callback, *args, **kwargs):
        if self._on_loop():
            return self._loop.call_soon(callback, *args, **kwargs)
        return self._loop.call_soon_threadsafe(callback, *args, **kwargs)


def ensure_event_loop() -> asyncio.AbstractEventLoop:
    """Register libvirt's event implementation (once per process) and return its loop."""
    global _loop
    with _lock:
        if _loop is not None:
            return _loop
        import libvirt
        import libvirtaio

        ready = threading.Event()
        failure: list[BaseException] = []
        holder: dict = {}

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                libvirtaio.virEventRegisterAsyncIOImpl(loop=_ThreadSafeLoop(loop, threading.get_ident()))
            except BaseException as exc:  # e.g. another implementation was registered first
                failure.append(exc)
                ready.set()
                return
            holder["loop"] = loop
            ready.set()
            loop.run_forever()

        thread = threading.Thread(target=run, name="libvirt-events", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        _loop = holder["loop"]

        def _quiet(ctx, err):  # libvirt prints every error to stderr unless a handler is set
            LOG.debug("libvirt: %s", err[2] if isinstance(err, (list, tuple)) and len(err) > 2 else err)

        libvirt.registerErrorHandler(_quiet, None)
        LOG.debug("libvirt event loop (libvirtaio) running in thread %s", thread.name)
        return _loop
