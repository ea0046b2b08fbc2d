"""The log lines of a Nefos process: each names the request it was written for, as text or JSON, on
standard error or in a file.

Every line carries the fields oslo.log prints from a request's context: the request id, the global
request id a caller passed on (``X-OpenStack-Request-Id``, carried in every bus message, so one
grep follows a request through the API, the conductor, the scheduler, the network service and the
compute host), the user and the project. ``log_format = json`` writes one JSON object a line
(python-json-logger) for a log shipper; ``log_file`` appends to a file, created readable by its
owner only, instead of standard error.

The APIs add one access line per request (``nefos.access``): client, method, path, status, body
length and time, as nova-api's request log does.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pythonjsonlogger.json import JsonFormatter

from nefos.context import current_context

TEXT_FORMAT = ("%(asctime)s %(levelname)s %(name)s "
               "[%(global_request_id)s %(request_id)s %(user_id)s %(project_id)s] %(message)s")
JSON_FIELDS = ("%(asctime)s %(levelname)s %(name)s %(message)s "
               "%(request_id)s %(global_request_id)s %(user_id)s %(project_id)s")
CONTEXT_FIELDS = ("request_id", "global_request_id", "user_id", "project_id")
# Libraries whose INFO lines say nothing an operator acts on.
QUIET = ("aiormq", "aio_pika", "sqlalchemy.engine", "uvicorn.access", "httpx")

ACCESS = logging.getLogger("nefos.access")


class RequestContextFilter(logging.Filter):
    """Gives each record the fields of the request being served ("-" outside one); a record that
    names them itself (an access line written after its context ended) keeps its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_context.get()
        for field in CONTEXT_FIELDS:
            if getattr(record, field, None) is None:
                value = getattr(ctx, field, None) if ctx is not None else None
                setattr(record, field, value or "-")
        return True


def _handler(log_file: str) -> logging.Handler:
    if not log_file:
        return logging.StreamHandler(sys.stderr)
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():  # what requests did is the operator's to read, not every local user's
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    return logging.FileHandler(path, encoding="utf-8")


def setup_logging(*, debug: bool = False, log_format: str = "text", log_file: str = "") -> None:
    """The process's one log handler, replacing any earlier one (``nefos`` commands call it once)."""
    handler = _handler(log_file)
    handler.addFilter(RequestContextFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter(JSON_FIELDS, rename_fields={"asctime": "time", "levelname": "level",
                                                                       "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def access(client: str, method: str, path: str, status: int, length: int, seconds: float, **context) -> None:
    """The access line of one request; ``context``: its request's ids, user and project, as known."""
    ACCESS.info('%s "%s %s" status: %d len: %d time: %.4f', client, method, path, status, length, seconds,
                extra={"client": client, "method": method, "path": path, "status": status, "length": length,
                       "duration": round(seconds, 6), **context})
