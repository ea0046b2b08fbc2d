"""A Networking API list as one statement of the list engine (``nefos.db.listing``).

Each resource describes its view's fields in SQL (``Columns``): an expression whose value is
the value the view shows (``name`` is ``coalesce(name, '')`` because the view shows ""), a column matched
exactly when the filter gives text (``Plain``), a value every row shows the same (``Fixed``:
``tags`` is always []), or, for a list the view shows, the condition that it holds one of some
values (``Holds``). From that, Neutron's query parameters
become the statement's conditions and order with Neutron's rules and errors (``attributes``):
a filter matches any of its values, with None, "" and "None" alike; the sort keys are closed by
the id in the last key's direction; the page is after the marker (or, ``page_reverse``, before
it). The caller's scope is in the statement it passes, so a page is never cut short by rows the
caller may not see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from sqlalchemy import String, false, or_, true

from nefos.db import codepoint, listing
from nefos.control.network import attributes as attrs


@dataclass(frozen=True)
class Fixed:
    """A field whose value is the same in every row's view."""
    value: Any


@dataclass(frozen=True)
class Plain:
    """A field filtered by its column itself when every value given is non-empty text: those
    values match the column's text exactly ("None" is a name then, not an empty one); otherwise
    as any other field, by ``view``, the expression of the value the view shows (default: the
    column). The ids, names, owners and device fields, which an index finds."""
    column: Any
    view: Any = None

    @property
    def shown(self):
        return self.column if self.view is None else self.view


@dataclass(frozen=True)
class Holds:
    """A list field: ``condition(values)`` is the SQL condition that the row's list holds any of
    ``values`` (for ``fixed_ips``: every (key, value) of the parsed filter)."""
    condition: Callable[[list], Any]


Columns = Mapping[str, Any]  # field -> SQL expression, Fixed or Holds


@dataclass(frozen=True)
class ListPlan:
    conditions: list
    keys: list
    marker: dict | None
    limit: int | None
    reverse: bool

    def statement(self, query):
        """``query`` (the caller's scope) filtered, ordered and paged."""
        return listing.paged(query.where(*self.conditions), self.keys, marker=self.marker,
                             limit=self.limit, reverse=self.reverse)

    def in_order(self, rows) -> list:
        return listing.page_rows(rows, reverse=self.reverse)


def _text(expression) -> bool:
    return isinstance(getattr(expression, "type", None), String)


def _is_in(expression, values: list):
    return codepoint.is_in(expression, values) if _text(expression) else expression.in_(values)


def _matches(expression, values: list):
    """The view's value of ``expression`` is one of ``values`` (None, "" and "None" alike)."""
    wanted = [attrs.norm(v) for v in values]
    alternatives = []
    if "" in wanted:
        alternatives.append(expression.is_(None))
        if _text(expression):
            alternatives.append(_is_in(expression, ["", "None"]))
    others = [w for w in wanted if w != ""]
    if others:
        alternatives.append(_is_in(expression, others))
    return or_(*alternatives) if alternatives else false()


def conditions(fields_set: set[str], columns: Columns, filters: dict | None) -> list:
    """The SQL conditions of Neutron's ``filters`` ({field: value or [values]}); 400 as Neutron."""
    out = []
    for field, values in (filters or {}).items():
        if not isinstance(values, list):
            values = [values]
        if field == "tenant_id":
            field = "project_id"
        if field in attrs.TAG_FILTERS:
            wanted = {t for v in values for t in str(v).split(",") if t}
            tags = columns.get("tags", Fixed([]))
            out.append(true() if attrs.tag_pred(field, wanted)({"tags": tags.value}) else false())
            continue
        if field == "fixed_ips" and "fixed_ips" in fields_set:
            out.append(columns["fixed_ips"].condition(attrs.parse_fixed_ips_filter(values)))
            continue
        if field not in attrs.filterable(fields_set):
            raise attrs.bad_request(f"[{field}] is invalid attribute for filtering")
        converted = [attrs.filter_value(field, v) for v in values]
        column = columns[field]
        if isinstance(column, Plain):
            if values and all(isinstance(v, str) and v for v in values):
                out.append(codepoint.is_in(column.column, values))
                continue
            column = column.shown
        if isinstance(column, Fixed):
            shown = column.value
            if field in attrs.LIST_FIELDS:
                held = any(v in (shown or []) for v in converted)
            else:
                held = attrs.norm(shown) in [attrs.norm(v) for v in converted]
            out.append(true() if held else false())
        elif isinstance(column, Holds):
            out.append(column.condition(converted))
        else:
            out.append(_matches(column, converted))
    return out


def sort_keys(fields_set: set[str], columns: Columns, sort_key, sort_dir) -> list[listing.SortKey]:
    """Neutron's sort keys (400 as Neutron), the id last; a field every row shows alike orders nothing."""
    keys = []
    for field, ascending in attrs.parse_sorts(fields_set, sort_key, sort_dir):
        column = columns[field]
        if isinstance(column, Plain):
            column = column.shown
        if isinstance(column, Fixed):
            continue
        expression = codepoint.ordered(column) if _text(column) else column
        keys.append(listing.SortKey(field, expression, not ascending))
    return keys


async def plan(fields_set: set[str], columns: Columns, *, filters, sort_key, sort_dir, limit, marker,
               page_reverse, get_marker: Callable[[str], Awaitable[dict]] | None) -> ListPlan:
    """The list's statement parts; the marker is read (404 when the caller cannot see it) through
    ``get_marker``, the resource's own get, and its view's values place the page."""
    where = conditions(fields_set, columns, filters)
    keys = sort_keys(fields_set, columns, sort_key, sort_dir)
    if limit is not None:
        limit = attrs.v_int(0)(limit, "limit")
    reverse = attrs.to_bool(page_reverse or False, "page_reverse")
    after = None
    if marker:
        doc = await get_marker(marker)
        after = {key.name: doc.get(key.name) for key in keys}
    return ListPlan(where, keys, after, limit or None, reverse)
