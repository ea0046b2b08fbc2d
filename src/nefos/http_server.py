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

After such an answer the server ends its side of the connection and drops whatever the client still
sends until the client closes too, or for ``LINGER_SECONDS`` at most: closing at once with the rest
of the request unread makes the kernel reset the connection, and the client can lose the answer.
"""

from __future__ import annotations

import asyncio
import http
import json
import re
import time
from typing import Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from nefos import exceptions, logs
from nefos.context import new_request_id

MAX_REQUEST_LINE = 8192  # bytes, without the line's CRLF: eventlet.wsgi's and Apache's 8 KiB
MAX_REQUEST_HEAD = 16 * 1024  # bytes: what h11 (and so uvicorn) holds of an incomplete head
LINGER_SECONDS = 2.0
_HEAD_END = re.compile(rb"\n\r?\n")  # the blank line that ends a head, as h11 finds it

ErrorBody = Callable[[int, str, str], dict]


class BoundedRequestHead(H11Protocol):
    """uvicorn's h11 protocol with the bounds and answers above."""

    error_body: ErrorBody | None = None  # the listener's error body; plain text without one

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # the rest of a refused request: read and dropped until the close
        if self.conn.their_state is h11.IDLE and self._refused_head(self.conn.trailing_data[0] + data):
            return
        super().data_received(data)

    def on_response_complete(self) -> None:
        # A pipelined request read while the one before was served: its head is checked here,
        # before h11 goes on to parse it.
        pending = self.conn.trailing_data[0]
        if pending and not self.transport.is_closing() and self._refused_head(pending):
            self.server_state.total_requests += 1
            return
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """What uvicorn answers when h11 cannot parse the request."""
        self._refuse(exceptions.Invalid("The request could not be parsed as HTTP/1.1."), "Invalid")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

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
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        logs.access(self.client[0] if self.client else "-", "-", "-", error.code, len(body),
                    time.perf_counter() - started, request_id=request_id)


def _without_line_end(pending: bytes, end: int) -> int:
    """The length of what ``pending`` holds up to the line end at ``end`` (its CR not counted), or
    all of it when ``end`` is -1 (the end has not come)."""
    if end < 0:
        return len(pending)
    return end - (pending[end - 1:end] == b"\r")


def protocol_for(app) -> type[BoundedRequestHead]:
    """The protocol class for a listener serving ``app``: its refusals in the app's own error body
    (``app.state.error_body``, which ``rest.make_app`` sets)."""
    error_body = getattr(getattr(app, "state", None), "error_body", None)
    return type("BoundedRequestHead", (BoundedRequestHead,),
                {"error_body": staticmethod(error_body) if error_body else None})
