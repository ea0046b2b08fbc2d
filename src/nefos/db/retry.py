"""Retrying a transaction the database gave up on: contention, or a lost connection.

PostgreSQL answers two concurrent transactions that wait for each other with ``deadlock
detected`` (and a serializable one with ``could not serialize access``); InnoDB with error 1213
(deadlock) or 1205 (lock wait timeout). Either way the transaction was rolled back whole and may
simply run again, as oslo.db's ``wrap_db_retry(retry_on_deadlock=True)`` does for Nova::

    async for attempt in retrying():
        with attempt:
            async with db.transaction() as s:
                ...

A transaction whose connection was lost (the server restarted, the connection was reset) or
that could not get one (the server is down or still starting) was rolled back too, and runs again
until the database is back, for at most ``DISCONNECT_TIMEOUT`` seconds (a restart takes a few).

Only the block is re-run, so it must have no effect outside its transaction. Whatever is still
raised at the end, ``transient_error`` turns into a 503 for the API's caller.
"""

from __future__ import annotations

import errno
import logging
from typing import Awaitable, Callable, TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, TimeoutError as PoolTimeout
from tenacity import AsyncRetrying, RetryCallState, before_sleep_log, retry_if_exception, wait_random_exponential

from nefos import exceptions, waiting

LOG = logging.getLogger(__name__)

_PG_SQLSTATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure
_MYSQL_ERRORS = {1213, 1205}  # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
ATTEMPTS = 10

# Seconds a transaction waits, retrying, for a database it lost (or could not reach) to come back.
DISCONNECT_TIMEOUT = 10.0

# PostgreSQL: class 08 (connection exception) and the server shutting down or starting up.
_PG_DISCONNECT_SQLSTATE_CLASS = "08"
_PG_DISCONNECT_SQLSTATES = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now
_MYSQL_DISCONNECT_ERRORS = {
    1053,  # ER_SERVER_SHUTDOWN
    1077,  # ER_NORMAL_SHUTDOWN
    1927,  # ER_CONNECTION_KILLED (MariaDB)
    2002,  # CR_CONNECTION_ERROR (socket)
    2003,  # CR_CONN_HOST_ERROR: can't connect
    2006,  # CR_SERVER_GONE_ERROR: server has gone away
    2013,  # CR_SERVER_LOST: lost connection during query
    2055,  # CR_SERVER_LOST_EXTENDED
    4031,  # ER_CLIENT_INTERACTION_TIMEOUT: disconnected by the server for inactivity
}
_SOCKET_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT,
                  errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENOTCONN}
_DRIVER_MODULES = ("asyncpg", "psycopg", "aiomysql", "pymysql", "sqlalchemy")


def _causes(exc: BaseException):
    """``exc``, the driver error a DBAPIError wraps, and every cause or context behind them."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        error = pending.pop(0)
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        pending.extend([getattr(error, "orig", None) if isinstance(error, DBAPIError) else None,
                        error.__cause__, error.__context__])


def _sqlstate(error: BaseException) -> str:
    return str(getattr(error, "sqlstate", None) or getattr(error, "pgcode", None) or "")


def _mysql_code(error: BaseException) -> int | None:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) and not isinstance(error, OSError) else None


def is_contention(exc: BaseException) -> bool:
    """True when ``exc`` is the database rolling a transaction back for contention."""
    if not isinstance(exc, DBAPIError):
        return False
    return any(_sqlstate(error) in _PG_SQLSTATES or _mysql_code(error) in _MYSQL_ERRORS
               for error in _causes(exc.orig))


def _raised_by_driver(exc: BaseException) -> bool:
    """True when ``exc`` came up through the database driver (or SQLAlchemy): asyncpg lets a
    refused connect out as the bare OSError, which elsewhere (a file, another service) would be
    no database's business."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith(_DRIVER_MODULES):
            return True
        tb = tb.tb_next
    return False


def _is_socket_error(error: BaseException) -> bool:
    # Not any TimeoutError: a statement that timed out still has its connection. asyncio reports
    # a connect refused on every address of a host as one OSError without an errno.
    return isinstance(error, ConnectionError) or (
        isinstance(error, OSError) and (error.errno in _SOCKET_ERRNOS or str(error).startswith("Multiple exceptions")))


def is_disconnect(exc: BaseException) -> bool:
    """True when ``exc`` is a lost database connection, or a connection the server refused
    (down, shutting down, still starting): what no retry within a moment can make worse."""
    if isinstance(exc, DisconnectionError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
    elif not _raised_by_driver(exc):
        return False
    for error in _causes(exc):
        state = _sqlstate(error)
        if state.startswith(_PG_DISCONNECT_SQLSTATE_CLASS) or state in _PG_DISCONNECT_SQLSTATES:
            return True
        if _mysql_code(error) in _MYSQL_DISCONNECT_ERRORS or _is_socket_error(error):
            return True
        if type(error).__name__ in ("ConnectionDoesNotExistError", "ConnectionFailureError"):
            return True
    return False


class _GiveUp:
    """Stop after ``attempts`` contentions, or once disconnects have lasted ``disconnect_timeout``."""

    def __init__(self, attempts: int, disconnect_timeout: float):
        self.attempts, self.disconnect_timeout = attempts, disconnect_timeout

    def __call__(self, state: RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome is not None else None
        if error is not None and is_disconnect(error):
            # Not past the deadline with the next wait either: the caller gets its answer in time.
            upcoming = state.upcoming_sleep or 0.0
            return (state.seconds_since_start or 0.0) + upcoming >= self.disconnect_timeout
        return state.attempt_number >= self.attempts


def _wait(state: RetryCallState) -> float:
    # Contention: short random waits, so the transactions that collided part (up to 1 s).
    # Disconnect: the database is restarting; look again every few tenths of a second.
    error = state.outcome.exception() if state.outcome is not None else None
    if error is not None and is_disconnect(error):
        return _WAIT_RECONNECT(state)
    return _WAIT_CONTENTION(state)


_WAIT_CONTENTION = wait_random_exponential(multiplier=0.01, max=1.0)
_WAIT_RECONNECT = wait_random_exponential(multiplier=0.05, min=0.05, max=0.5)


def retrying(attempts: int = ATTEMPTS, disconnect_timeout: float | None = None) -> AsyncRetrying:
    """Attempts of a transaction: again after contention (randomised, growing waits up to 1 s), at
    most ``attempts`` times; again after a lost or refused connection until ``disconnect_timeout``
    (default ``DISCONNECT_TIMEOUT``) seconds have passed. Any other error, or the last one, is raised."""
    timeout = DISCONNECT_TIMEOUT if disconnect_timeout is None else disconnect_timeout
    return waiting.retrying(retry=retry_if_exception(lambda exc: is_contention(exc) or is_disconnect(exc)),
                            stop=_GiveUp(attempts, timeout), wait=_wait,
                            before_sleep=before_sleep_log(LOG, logging.INFO))


T = TypeVar("T")


async def retried(function: Callable[..., Awaitable[T]], *args) -> T:
    """``function(*args)`` run again while ``retrying`` allows: for work that is one transaction, or
    transactions each of which may simply run again (a claim moved, a build request finished)."""
    async for attempt in retrying():
        with attempt:
            return await function(*args)


async def at_start(work: Callable[[], Awaitable[T]]) -> T:
    """Run a starting service's database work (``work()``: transactions that may simply run again)
    until the database lets it. A lost or refused connection is waited out however long it lasts,
    each failure logged, so a service started while its database restarts serves once it is back
    instead of exiting, as Nova's services retry their database at start (oslo.db's
    ``max_retries``); contention is tried again too. Cancel it to give up (a SIGTERM)."""
    async for attempt in waiting.until_reachable(
            "database", retry_if_exception(lambda exc: is_disconnect(exc) or is_contention(exc)), LOG):
        with attempt:
            return await work()


def transient_error(exc: BaseException) -> exceptions.NefosError | None:
    """The 503 to answer for ``exc`` when it is the database being away (DatabaseUnavailable) or
    still too contended after the retries (DatabaseBusy); None for any other error."""
    if is_disconnect(exc):
        return exceptions.DatabaseUnavailable()
    if is_contention(exc) or isinstance(exc, PoolTimeout):
        # PoolTimeout: every connection of this process's pool stayed busy past pool_timeout (the
        # pool is sized to the deployment's connection budget): busy, try again, not a server fault.
        return exceptions.DatabaseBusy()
    return None
