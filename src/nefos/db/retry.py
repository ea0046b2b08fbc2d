"""Retrying a transaction the database gave up on because of contention.

PostgreSQL answers two concurrent transactions that wait for each other with ``deadlock
detected`` (and a serializable one with ``could not serialize access``); InnoDB with error 1213
(deadlock) or 1205 (lock wait timeout). Either way the transaction was rolled back whole and may
simply run again, as oslo.db's ``wrap_db_retry(retry_on_deadlock=True)`` does for Nova::

    async for attempt in retrying():
        with attempt:
            async with db.transaction() as s:
                ...

Only the block is re-run, so it must have no effect outside its transaction.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError
from tenacity import (AsyncRetrying, before_sleep_log, retry_if_exception, stop_after_attempt,
                      wait_random_exponential)

LOG = logging.getLogger(__name__)

_PG_SQLSTATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure
_MYSQL_ERRORS = {1213, 1205}  # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
ATTEMPTS = 10


def is_contention(exc: BaseException) -> bool:
    """True when ``exc`` is the database rolling a transaction back for contention."""
    if not isinstance(exc, DBAPIError):
        return False
    seen: set[int] = set()
    error: BaseException | None = exc.orig
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "sqlstate", None) in _PG_SQLSTATES or getattr(error, "pgcode", None) in _PG_SQLSTATES:
            return True
        args = getattr(error, "args", ())
        if args and isinstance(args[0], int) and args[0] in _MYSQL_ERRORS:
            return True
        error = error.__cause__ or error.__context__
    return False


def retrying(attempts: int = ATTEMPTS) -> AsyncRetrying:
    """Attempts of a transaction: again after contention (randomised, growing waits up to 1 s),
    at most ``attempts`` times; any other error, or the last contention, is raised."""
    return AsyncRetrying(retry=retry_if_exception(is_contention), stop=stop_after_attempt(attempts),
                         wait=wait_random_exponential(multiplier=0.01, max=1.0), reraise=True,
                         before_sleep=before_sleep_log(LOG, logging.INFO))
