"""Admission of a listener's connections, as haproxy's ``maxconn`` and per-source limits do: the
connections one listener holds open from each client address and in all, and the refused ones
still lingering toward their close.

Every API listener (``nefos.http_server``) and each network's metadata proxy
(``nefos.agents.metadata_proxy``, host-side: this module imports no database and no
service) count their connections here. A connection is admitted while its address holds fewer than
``maxconn_per_source`` (else ``429 Too Many Requests``) and the listener fewer than ``maxconn``
(else ``503 Service Unavailable``); each refusal is logged once, until the address holds none again
or the listener is below ``maxconn`` again.

After an answer the server ends its side and reads and drops what the client still sends until the
client closes too (closing with unread bytes makes the kernel reset the connection, and the client
can lose the answer): at most ``MAX_LINGERING`` connections of a listener linger so at once, more
close at once.
"""

from __future__ import annotations

import logging
from collections import Counter

from nefos import exceptions

MAX_LINGERING = 64


class ConnectionCounts:
    """The connections one listener holds: admitted ones per client address, and lingering ones."""

    def __init__(self, maxconn: int, maxconn_per_source: int, log: logging.Logger, where: str = ""):
        self.maxconn = maxconn  # connections open at once on the listener
        self.maxconn_per_source = maxconn_per_source  # of them, from one client address
        self.open: Counter[str] = Counter()
        self.open_total = 0
        self.lingering = 0
        self._log = log
        self._where = where  # the log lines' prefix naming the listener
        self._refusing: set[str] = set()  # addresses refused since they last held none (logged once)
        self._full = False  # maxconn reached (logged once until it is not)

    def admit(self, source: str) -> exceptions.NefosError | None:
        """None when a connection from ``source`` is admitted (and counted), else why it is not."""
        if self.open[source] >= self.maxconn_per_source:
            if source not in self._refusing:
                self._refusing.add(source)
                self._log.warning("%s%s holds %d connections; refusing more (429)", self._where, source,
                                  self.open[source])
            return exceptions.TooManyRequests("Too many connections from this address.")
        if self.open_total >= self.maxconn:
            if not self._full:
                self._full = True
                self._log.warning("%s%d connections open; refusing more (503)", self._where, self.open_total)
            return exceptions.ServiceUnavailable("Too many connections: try again later.")
        self.open[source] += 1
        self.open_total += 1
        return None

    def leave(self, source: str) -> None:
        """An admitted connection from ``source`` ended."""
        self.open_total -= 1
        self.open[source] -= 1
        if self.open[source] <= 0:
            del self.open[source]
            self._refusing.discard(source)
        if self.open_total < self.maxconn:
            self._full = False

    def start_lingering(self) -> bool:
        """Whether one more connection may linger before its close (then it counts until
        ``end_lingering``); False when ``MAX_LINGERING`` already do."""
        if self.lingering >= MAX_LINGERING:
            return False
        self.lingering += 1
        return True

    def end_lingering(self) -> None:
        self.lingering -= 1
