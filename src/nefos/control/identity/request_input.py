"""Reading Identity API requests: the fields of a request body, Keystone's answers when one is
wrong, and the equality filters of the list routes (their query schema, their SQL, their test on
a row: one table of {parameter: column} per list serves all three)."""

from __future__ import annotations

from typing import Any

from nefos.control.identity import schemas
from nefos.control.identity.core import bad_request


def query_bool(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("0", "false", "no", "off")


def filter_query(filters: dict, **more: dict) -> dict:
    """The query schema of a list's equality filters ({parameter: column}) and ``more``."""
    return schemas.query(**{name: {"type": "boolean" if _is_bool(column) else "string"}
                            for name, column in filters.items()}, **more)


def _is_bool(column) -> bool:
    return column.type.python_type is bool


def _filter_value(column, value: str):
    return query_bool(value) if _is_bool(column) else value


def where_filters(q, params, filters: dict):
    """``q`` restricted to the rows equal to each filter of ``filters`` given in ``params``."""
    for name, column in filters.items():
        if name in params:
            q = q.where(column == _filter_value(column, params[name]))
    return q


def matches_filters(row, params, filters: dict) -> bool:
    return all(getattr(row, column.key) == _filter_value(column, params[name])
               for name, column in filters.items() if name in params)


def valid_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise bad_request(f"Invalid input for field 'name': a {what} name must be a non-empty "
                          f"string of at most 255 characters.")
    return value


def valid_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise bad_request(f"Invalid input for field '{field}': {value!r} is not a boolean.")
    return value


def valid_text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad_request(f"Invalid input for field '{field}': {value!r} is not a string.")
    return value


def valid_tags(value: Any) -> list[str]:
    if value is None:
        return []
    if (not isinstance(value, list) or not all(isinstance(t, str) and 0 < len(t) <= 255 for t in value)
            or len(value) > 80):
        raise bad_request("Invalid input for field 'tags': expected a list of strings.")
    return list(dict.fromkeys(value))


def valid_password(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 4096:
        raise bad_request("Invalid input for field 'password': expected a string.")
    return value
