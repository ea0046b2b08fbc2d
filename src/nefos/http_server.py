"""The HTTP protocol every Nefos listener serves with: uvicorn's h11 protocol, with a bound on the
request line answered ``414 URI Too Long``.

h11 bounds only the request head it holds incomplete (16 KiB), and only while it waits for more:
a request line that arrived whole went through however long it was, and one that arrived in pieces
was cut off with a 400 and a close, often a reset before the client read the answer. Here a
request line (method, target and version) longer than ``MAX_REQUEST_LINE`` bytes gets 414, in the
listener's own error body, as eventlet's WSGI server (which served Nova, Neutron and Glance)
answers past its 8 KiB; python-neutronclient then splits its filter into several requests.

After the 414 the server ends its side of the connection and drops whatever the client still
sends until the client closes too, or for ``LINGER_SECONDS`` at most: closing at once with the
rest of the request unread makes the kernel reset the connection, and the client can lose the
answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nefos import exceptions, logs
from nefos.context import new_request_id

MAX_REQUEST_LINE = 8192  # bytes, without the line's CRLF: eventlet.wsgi's and Apache's 8 KiB
LINGER_SECONDS = 2.0

ErrorBody = Callable[[int, str, str], dict]


class BoundedRequestLine(H11Protocol):
    """uvicorn's h11 protocol, refusing a request line over ``MAX_REQUEST_LINE`` with 414."""

    error_body: ErrorBody | None = None  # the listener's error body; plain text without one

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._refused_at: float | None = None
        self._linger: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._refused_at is not None:
            return  # the rest of a refused request: read and dropped until the close
        if self.conn.their_state is h11.IDLE and _request_line_length(self.conn.trailing_data[0] + data) > MAX_REQUEST_LINE:
            self._refuse()
            return
        super().data_received(data)

    def on_response_complete(self) -> None:
        # A pipelined request read while the one before was served: its line is checked here,
        # before h11 goes on to parse it.
        pending = self.conn.trailing_data[0]
        if pending and not self.transport.is_closing() and _request_line_length(pending) > MAX_REQUEST_LINE:
            self.server_state.total_requests += 1
            self._refuse()
            return
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def _refuse(self) -> None:
        self._refused_at = time.perf_counter()
        self._unset_keepalive_if_required()
        error = exceptions.RequestURITooLong()
        if self.error_body is not None:
            body = json.dumps(self.error_body(error.code, str(error), type(error).__name__)).encode()
            content_type = b"application/json"
        else:
            body, content_type = str(error).encode(), b"text/plain; charset=utf-8"
        request_id = new_request_id()
        head = [b"HTTP/1.1 414 URI Too Long", *(name + b": " + value for name, value in self.server_state.default_headers),
                b"content-type: " + content_type, b"content-length: %d" % len(body),
                b"x-openstack-request-id: " + request_id.encode(), b"connection: close"]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        logs.access(self.client[0] if self.client else "-", "-", "-", error.code, len(body),
                    time.perf_counter() - self._refused_at, request_id=request_id)


def _request_line_length(head: bytes) -> int:
    """The length of the request line that ``head`` starts (all of it while its end has not come);
    the empty lines h11 allows before it do not count."""
    head = head.lstrip(b"\r\n")
    end = head.find(b"\n")
    if end < 0:
        return len(head)
    return end - 1 if end and head[end - 1:end] == b"\r" else end


def protocol_for(app) -> type[BoundedRequestLine]:
    """The protocol class for a listener serving ``app``: its 414 in the app's own error body
    (``app.state.error_body``, which ``rest.make_app`` sets)."""
    error_body = getattr(getattr(app, "state", None), "error_body", None)
    return type("BoundedRequestLine", (BoundedRequestLine,), {"error_body": staticmethod(error_body) if error_body else None})
