"""The HTTP protocol every Nefos listener serves with: uvicorn's h11 protocol, with bounds on the
request head and answers, in the listener's own error body, for what it cannot serve.

h11 bounds only the request head it holds incomplete (16 KiB), and only while it waits for more:
a request line or header block that arrived whole went through however long it was, and one that
arrived in pieces was cut off with a plain-text 400 and a close, often a reset before the client
read the answer. Here, whether a head arrives whole, in pieces or pipelined behind another request:

- a request line (method, target and version) longer than ``MAX_REQUEST_LINE`` bytes gets
  ``414 URI Too Long``, as eventlet's WSGI server (which served Nova, Neutron and Glance) answers
  past its 8 KiB; python-neutronclient then splits its filter into several requests;
- a head (line and headers) longer than ``MAX_REQUEST_HEAD`` bytes gets
  ``431 Request Header Fields Too Large``;
- a head h11 cannot parse (a malformed line or header) gets 400.

One client cannot hold a listener's connections (``ConnectionLimits``, counted by
``nefos.admission`` as the metadata proxy's are; uvicorn bounds neither a connection that never
finishes its request head nor how many one client opens):

- a request head must arrive whole within ``http_request_timeout`` of the connection (or, on a
  keep-alive connection, of the head's first byte; the wait before it is uvicorn's
  ``timeout_keep_alive``), however it trickles in: ``408 Request Timeout`` after it, or a close
  without an answer when nothing came at all (haproxy's ``timeout http-request``). Once the head is
  complete the deadline is gone: a long answer, an event stream or a websocket runs on;
- a listener holds at most ``http_maxconn`` connections (more are answered
  ``503 Service Unavailable`` at once: haproxy's ``maxconn``), ``http_maxconn_per_source`` of them
  from one client address (more: ``429 Too Many Requests`` at once), as the metadata proxy admits.

After such an answer the server ends its side of the connection and drops whatever the client still
sends until the client closes too, or for ``LINGER_SECONDS`` at most: closing at once with the rest
of the request unread makes the kernel reset the connection, and the client can lose the answer.
A connection refused at once (429, 503) lingers so only while fewer than ``MAX_LINGERING`` of them do
on the listener (they hold no place in its counts); beyond, it closes at once.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import re
import resource
import time
from dataclasses import dataclass
from typing import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nefos import admission, exceptions, logs
from nefos.config import Config
from nefos.context import new_request_id

LOG = logging.getLogger(__name__)

MAX_REQUEST_LINE = 8192  # bytes, without the line's CRLF: eventlet.wsgi's and Apache's 8 KiB
MAX_REQUEST_HEAD = 16 * 1024  # bytes: what h11 (and so uvicorn) holds of an incomplete head
LINGER_SECONDS = 2.0
MAX_LINGERING = admission.MAX_LINGERING
# Open files a Nefos process holds besides its listeners' connections (database pools, the bus,
# libvirt, log files, the console proxy's connections to guests): kept free of the listeners' share.
OTHER_OPEN_FILES = 1024
_HEAD_END = re.compile(rb"\n\r?\n")  # the blank line that ends a head, as h11 finds it

ErrorBody = Callable[[int, str, str], dict]


@dataclass(frozen=True)
class ConnectionLimits:
    """What one listener admits (the options ``http_request_timeout``, ``http_maxconn``,
    ``http_maxconn_per_source``)."""
    request_timeout: float  # seconds for a whole request head
    maxconn: int  # connections open at once on the listener
    maxconn_per_source: int  # of them, from one client address

    @classmethod
    def of(cls, cfg: Config, listeners: int = 1) -> "ConnectionLimits":
        """The limits of each of a process's ``listeners``: their connections together fit below the
        process's open-file limit, which is raised toward its hard limit as far as they need (as Go's
        runtime and nginx's ``worker_rlimit_nofile`` do; systemd's soft limit is 1024, its hard one
        524288). Where the hard limit is too low, ``http_maxconn`` is lowered to fit (with a part of
        the limit kept for the process's other files) and ``http_maxconn_per_source`` in proportion."""
        limit = _open_files_limit(listeners * cfg.http_maxconn + OTHER_OPEN_FILES)
        available = limit - min(OTHER_OPEN_FILES, limit // 4)
        maxconn = min(cfg.http_maxconn, max(1, available // max(1, listeners)))
        per_source = min(cfg.http_maxconn_per_source, max(1, cfg.http_maxconn_per_source * maxconn // cfg.http_maxconn))
        if maxconn < cfg.http_maxconn:
            LOG.warning("the open-file limit (ulimit -n) %d leaves each of %d listeners %d connections (%d from "
                        "one address), fewer than http_maxconn = %d: raise the limit (systemd: LimitNOFILE)",
                        limit, listeners, maxconn, per_source, cfg.http_maxconn)
        return cls(cfg.http_request_timeout, maxconn, per_source)


def _open_files_limit(wanted: int) -> int:
    """The process's open-file (soft) limit, first raised to ``wanted`` where the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        if raised > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    return wanted if soft == resource.RLIM_INFINITY else soft


class ListenerConnections(admission.ConnectionCounts):
    """The connections one listener holds (``nefos.admission``), within its ``limits``."""

    def __init__(self, limits: ConnectionLimits):
        super().__init__(limits.maxconn, limits.maxconn_per_source, LOG)
        self.limits = limits


class BoundedRequestHead(H11Protocol):
    """uvicorn's h11 protocol with the bounds and answers above."""

    error_body: ErrorBody | None = None  # the listener's error body; plain text without one
    listener: ListenerConnections  # shared by the listener's connections (set by ``protocol_for``)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None
        self._lingering_refused = False
        self._source: str | None = None  # the client's address while the connection counts
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        source = self.client[0] if self.client else ""
        refusal = self.listener.admit(source)
        if refusal is not None:
            self._refuse(refusal, type(refusal).__name__)
            return
        self._source = source
        self._start_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the rest of a refused request: read and dropped until the close
        if self.conn.their_state is h11.IDLE:
            self._start_head_deadline()  # a keep-alive connection's next head begins
            if self._refused_head(self.conn.trailing_data[0] + data):
                return
        super().data_received(data)
        self._end_head_deadline_once_read()

    def on_response_complete(self) -> None:
        # A pipelined request read while the one before was served: its head is checked here,
        # before h11 goes on to parse it.
        pending = self.conn.trailing_data[0]
        if pending and not self.transport.is_closing() and self._refused_head(pending):
            self.server_state.total_requests += 1
            return
        super().on_response_complete()
        if pending:  # the next head began arriving during the answer: its deadline runs from here
            self._start_head_deadline()
            self._end_head_deadline_once_read()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        super().handle_websocket_upgrade(event)
        # The websocket protocol serves the connection from here on: the connection leaves the
        # listener's count when it ends.
        upgraded = self.transport.get_protocol()
        websocket_lost = upgraded.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            try:
                websocket_lost(exc)
            finally:
                self._leave()
        upgraded.connection_lost = connection_lost

    def send_400_response(self, msg: str) -> None:
        """What uvicorn answers when h11 cannot parse the request."""
        self._refuse(exceptions.Invalid("The request could not be parsed as HTTP/1.1."), "Invalid")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self._lingering_refused:
            self._lingering_refused = False
            self.listener.end_lingering()
        self._cancel_head_deadline()
        self._leave()
        super().connection_lost(exc)

    def _leave(self) -> None:
        if self._source is not None:
            self.listener.leave(self._source)
            self._source = None

    def _start_head_deadline(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.listener.limits.request_timeout,
                                                       self._head_timed_out)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _end_head_deadline_once_read(self) -> None:
        """The deadline ends with the head: once h11 has read it (a request is being served, or the
        connection was handed to a websocket) or the connection is closing."""
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._cancel_head_deadline()

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:
            self._refuse(exceptions.RequestTimeout(), "RequestTimeout")
        else:  # nothing came (or nothing since the last answer): no request to answer
            self._unset_keepalive_if_required()
            self.transport.close()

    def _refused_head(self, pending: bytes) -> bool:
        """Refuse the request ``pending`` starts when its line or head is over the bounds."""
        pending = pending.lstrip(b"\r\n")  # the empty lines h11 allows before a request
        blank_line = _HEAD_END.search(pending)
        if _without_line_end(pending, pending.find(b"\n")) > MAX_REQUEST_LINE:
            error: exceptions.NefosError = exceptions.RequestURITooLong()
        elif _without_line_end(pending, blank_line.start() if blank_line else -1) > MAX_REQUEST_HEAD:
            error = exceptions.RequestHeaderFieldsTooLarge()
        else:
            return False
        self._refuse(error, type(error).__name__)
        return True

    def _refuse(self, error: exceptions.NefosError, kind: str) -> None:
        started = time.perf_counter()
        self._refused = True
        self._cancel_head_deadline()
        self._unset_keepalive_if_required()
        if self.error_body is not None:
            body = json.dumps(self.error_body(error.code, str(error), kind)).encode()
            content_type = b"application/json"
        else:
            body, content_type = str(error).encode(), b"text/plain; charset=utf-8"
        request_id = new_request_id()
        status = f"HTTP/1.1 {error.code} {http.HTTPStatus(error.code).phrase}".encode()
        head = [status, *(name + b": " + value for name, value in self.server_state.default_headers),
                b"content-type: " + content_type, b"content-length: %d" % len(body),
                b"x-openstack-request-id: " + request_id.encode(), b"connection: close"]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        if self._source is None:
            # Refused at once (429, 503; logged once per address by ``admit``): not counted, so how
            # many linger is bounded here.
            if not self.listener.start_lingering():
                self.transport.close()  # the answer is still sent; what the client sends may reset it
                return
            self._lingering_refused = True
        else:
            logs.access(self.client[0] if self.client else "-", "-", "-", error.code, len(body),
                        time.perf_counter() - started, request_id=request_id)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)


def _without_line_end(pending: bytes, end: int) -> int:
    """The length of what ``pending`` holds up to the line end at ``end`` (its CR not counted), or
    all of it when ``end`` is -1 (the end has not come)."""
    if end < 0:
        return len(pending)
    return end - (pending[end - 1:end] == b"\r")


def protocol_for(app, limits: ConnectionLimits | None = None) -> type[BoundedRequestHead]:
    """The protocol class for a listener serving ``app``: its refusals in the app's own error body
    (``app.state.error_body``, which ``rest.make_app`` sets), its connections within ``limits``
    (by default the shipped options')."""
    error_body = getattr(getattr(app, "state", None), "error_body", None)
    return type("BoundedRequestHead", (BoundedRequestHead,),
                {"error_body": staticmethod(error_body) if error_body else None,
                 "listener": ListenerConnections(limits or ConnectionLimits.of(Config()))})
