"""Account lockout (Keystone's ``lockout_failure_attempts`` and ``lockout_duration``).

Every password attempt on a user is counted before its hash is computed, by one conditional
UPDATE that refuses once ``lockout_failure_attempts`` attempts are counted within
``lockout_duration`` of the last one. The count is the database's, so guesses sent at once, to one
process or to several sharing the database, cannot all be checked against a count none of them
has raised yet: at most ``lockout_failure_attempts`` of them are evaluated, the others are refused
as locked without a hash. A correct password clears the count again when no attempt was counted
after its own; while others were, their count stands.

A user with Keystone's resource option ``ignore_lockout_failure_attempts`` is never counted nor
locked (the cloud sets it on its services' account, whose password is generated).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import case, or_, select, update

from nefos import exceptions
from nefos.db.models import IdentityUser
from nefos.timeutils import utcnow

IGNORE_LOCKOUT = "ignore_lockout_failure_attempts"
# The user resource options Nefos implements (Keystone has more; others are refused with 400).
USER_OPTIONS = (IGNORE_LOCKOUT,)


def user_options(value: Any, current: dict | None = None) -> dict:
    """``current`` updated with a request's ``options`` (Keystone: a null value unsets an option)."""
    if not isinstance(value, dict):
        raise exceptions.ValidationError("Invalid input for field 'options': expected an object.")
    options = dict(current or {})
    for name, setting in value.items():
        if name not in USER_OPTIONS:
            raise exceptions.ValidationError(f"Invalid input for field 'options': '{name}' is not a "
                                             f"supported user option ({', '.join(USER_OPTIONS)}).")
        if setting is None:
            options.pop(name, None)
        elif isinstance(setting, bool):
            options[name] = setting
        else:
            raise exceptions.ValidationError(
                f"Invalid input for field 'options': {name} must be a boolean or null.")
    return options


def _counted(cfg, user: IdentityUser) -> bool:
    return cfg.lockout_failure_attempts > 0 and not (user.options or {}).get(IGNORE_LOCKOUT)


def locked_out(user_id: str) -> exceptions.Unauthorized:
    return exceptions.Unauthorized(f"The account is locked for user: {user_id}.")


async def count_attempt(rt, user: IdentityUser) -> int | None:
    """Count one password attempt on ``user`` before it is checked: its place in the count, or
    None when the user is not counted. Raises 401 (locked) when the count is already full."""
    cfg = rt.cfg
    if not _counted(cfg, user):
        return None
    now = utcnow()
    window_over = or_(IdentityUser.failed_auth_at.is_(None),
                      IdentityUser.failed_auth_at <= now - dt.timedelta(seconds=cfg.lockout_duration))
    async with rt.db.transaction() as s:
        # MySQL assigns left to right, later expressions seeing earlier results: the count first,
        # while failed_auth_at is still the previous attempt's.
        counted = await s.execute(
            update(IdentityUser)
            .where(IdentityUser.id == user.id,
                   or_(window_over, IdentityUser.failed_auth_count < cfg.lockout_failure_attempts))
            .ordered_values((IdentityUser.failed_auth_count,
                             case((window_over, 1), else_=IdentityUser.failed_auth_count + 1)),
                            (IdentityUser.failed_auth_at, now))
            .execution_options(synchronize_session=False))
        if counted.rowcount != 1:
            raise locked_out(user.id)
        # The row stays locked by the UPDATE until commit: this is our own count.
        return (await s.execute(select(IdentityUser.failed_auth_count)
                                .where(IdentityUser.id == user.id))).scalar_one()


async def clear_after_success(rt, user_id: str, place: int | None) -> None:
    """A correct password clears the count when no attempt was counted after its own."""
    if place is None:
        return
    async with rt.db.transaction() as s:
        await s.execute(update(IdentityUser)
                        .where(IdentityUser.id == user_id, IdentityUser.failed_auth_count == place)
                        .values(failed_auth_count=0, failed_auth_at=None)
                        .execution_options(synchronize_session=False))


def forget_failures(row: IdentityUser) -> None:
    """A new password (or an administrator's reset) starts the count again."""
    row.failed_auth_count, row.failed_auth_at = 0, None
