"""What an instance fault records of an error (its code and message), computed where the error
happened — a compute host sends this form to the conductor, never the exception itself."""

from __future__ import annotations

from nefos import exceptions


def fault_of(exc: BaseException) -> dict:
    """As Nova: unexpected errors are reported by their class name, known ones keep their text."""
    code = getattr(exc, "code", 500) or 500
    message = type(exc).__name__ if code == 500 and not isinstance(exc, exceptions.NefosError) else str(exc)
    if isinstance(exc, exceptions.NefosError) and code == 500:
        message = str(exc) or type(exc).__name__
    return {"code": code, "message": message[:255]}
