"""The list engine: one filtered, sorted, keyset-paged statement for every API's lists.

A list's order is a sequence of ``SortKey`` (a name, the SQL expression whose value the API shows,
a direction). The caller closes it with the row's id, so each row has exactly one place and a page
boundary never splits or repeats rows that tie on the other keys. NULL sorts lowest on every
backend (first ascending, last descending), as Python sorts a missing value before any other.
Text is ordered by code point, as Python orders strings (``nefos.db.codepoint``), on every backend.

A page after a marker is a keyset condition: the rows strictly after the marker row's values in
that order. The marker row itself need not pass the filters (Glance and Neutron page after a
marker the filters would drop), and nothing before it is read. A reversed page (Neutron's
``page_reverse``) is the same statement with every direction flipped; the caller turns the rows
back to the list's order (``page_rows``).

The caller's scope (project, visibility) and the filters are conditions of the same statement,
so a page is ``limit`` rows of what the caller may see, never a page cut short by rows it may not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from sqlalchemy import and_, false, literal, or_


@dataclass(frozen=True)
class SortKey:
    name: str  # the key of the marker's value in the mapping ``after`` reads
    expression: Any
    descending: bool = False

    def flipped(self) -> "SortKey":
        return replace(self, descending=not self.descending)


def _nullable(expression) -> bool:
    return getattr(expression, "nullable", True) is not False


def order_by(keys: Sequence[SortKey]) -> list:
    """ORDER BY clauses for ``keys``; NULL is lowest (first ascending, last descending)."""
    clauses = []
    for key in keys:
        if _nullable(key.expression):
            known = key.expression.is_not(None)
            clauses.append(known.desc() if key.descending else known.asc())
        clauses.append(key.expression.desc() if key.descending else key.expression.asc())
    return clauses


def after(keys: Sequence[SortKey], marker: Mapping[str, Any]) -> Any:
    """The rows that come after the one whose values are ``marker`` ({key name: value}) in ``keys``."""
    def equal(expression, value):
        return expression.is_(None) if value is None else expression == literal(value, expression.type)

    def beyond(expression, value, descending):
        if value is None:
            return false() if descending else expression.is_not(None)
        if descending:
            below = expression < literal(value, expression.type)
            return or_(below, expression.is_(None)) if _nullable(expression) else below
        return expression > literal(value, expression.type)

    alternatives = []
    for i, key in enumerate(keys):
        same_before = [equal(k.expression, marker[k.name]) for k in keys[:i]]
        alternatives.append(and_(*same_before, beyond(key.expression, marker[key.name], key.descending)))
    return or_(*alternatives)


def marker_values(keys: Sequence[SortKey]) -> list:
    """The columns to select for a marker row's values, labelled by key name."""
    return [key.expression.label(key.name) for key in keys]


def paged(query, keys: Sequence[SortKey], *, marker: Mapping[str, Any] | None = None,
          limit: int | None = None, reverse: bool = False):
    """``query`` ordered by ``keys``, after ``marker``, at most ``limit`` rows (None: all).
    ``reverse``: the rows before the marker, the nearest first (see ``page_rows``)."""
    if reverse:
        keys = [key.flipped() for key in keys]
    if marker is not None:
        query = query.where(after(keys, marker))
    query = query.order_by(*order_by(keys))
    return query if limit is None else query.limit(limit)


def page_rows(rows: Sequence, *, reverse: bool = False) -> list:
    """The rows of a ``paged`` statement in the list's order."""
    return list(reversed(rows)) if reverse else list(rows)
