"""Reading Identity API requests: the fields of a request body, checked against their JSON Schema
(``schemas``, through the shared validator) with Keystone's answers when one is wrong, and the
equality filters of the list routes (their query schema, their SQL, their test on a row: one
table of {parameter: column} per list serves all three)."""

from __future__ import annotations

from typing import Any

from nefos.control.identity import schemas
from nefos.control.identity.core import fits


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
    return fits(value, schemas.name_field(what))


def valid_bool(value: Any, field: str) -> bool:
    return fits(value, schemas.boolean_field(field))


def valid_text(value: Any, field: str) -> str:
    return fits(value, schemas.text_field(field)) or ""


def valid_tags(value: Any) -> list[str]:
    return list(dict.fromkeys(fits(value, schemas.TAGS_FIELD) or []))


def valid_password(value: Any) -> str | None:
    return fits(value, schemas.PASSWORD_FIELD)
