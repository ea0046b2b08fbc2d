"""The TLS settings every outgoing HTTP client of a process shares.

httpx builds a new TLS context for each client it opens, reading the whole CA bundle each time
(about 20 ms of CPU). The services open clients as they start and as they need them; one
context, built once per process with httpx's own defaults (its CA bundle, or ``SSL_CERT_FILE`` /
``SSL_CERT_DIR`` when set), verifies every client's peers the same way at no such cost. A TLS
context is safe to share between connections and clients.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def verified_tls() -> ssl.SSLContext:
    """The process's TLS context: verify peers against the CA bundle httpx trusts by default."""
    return httpx.create_ssl_context()
