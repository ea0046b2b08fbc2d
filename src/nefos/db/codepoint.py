"""Text compared as Python compares strings, by code point, on every backend.

SQLite compares text by code point already. PostgreSQL orders by the database's collation
(equality is exact: its default collations are deterministic); MySQL's default collation orders
and matches without case. The lists filter and sort with these, so their order and matches are
the same whichever database holds the rows, and as Python would give them; equality keeps the
plain comparison first, so an index on the column still finds the rows.
"""

from __future__ import annotations

from sqlalchemy import Boolean, String, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal


class _Ordered(ColumnElement):
    inherit_cache = True
    _traverse_internals = [("text", InternalTraversal.dp_clauseelement)]

    def __init__(self, expression) -> None:
        self.text = expression
        self.type = expression.type

    @property
    def nullable(self) -> bool:
        return getattr(self.text, "nullable", True)


def ordered(expression) -> ColumnElement:
    """``expression`` (text) ordered and compared (<, >) by code point."""
    return _Ordered(expression)


@compiles(_Ordered)
def _ordered_default(element, compiler, **kw):
    return compiler.process(element.text, **kw)


@compiles(_Ordered, "postgresql")
def _ordered_postgresql(element, compiler, **kw):
    return f'({compiler.process(element.text, **kw)} COLLATE "C")'


@compiles(_Ordered, "mysql")
def _ordered_mysql(element, compiler, **kw):
    return f"({compiler.process(element.text, **kw)} COLLATE utf8mb4_bin)"


class _IsIn(ColumnElement):
    type = Boolean()
    _is_implicitly_boolean = True  # a condition as it is (no "= 1" where booleans are integers)
    inherit_cache = True
    _traverse_internals = [("plain", InternalTraversal.dp_clauseelement),
                           ("binary", InternalTraversal.dp_clauseelement)]

    def __init__(self, expression, values) -> None:
        self.plain = expression.in_(values)
        self.binary = _Ordered(expression).in_(values)


def is_in(expression, values) -> ColumnElement:
    """``expression`` (text) is one of ``values``, exactly."""
    return _IsIn(expression, list(values))


@compiles(_IsIn)
def _is_in_default(element, compiler, **kw):
    return compiler.process(element.plain, **kw)


@compiles(_IsIn, "mysql")
def _is_in_mysql(element, compiler, **kw):
    return f"({compiler.process(element.plain, **kw)} AND {compiler.process(element.binary, **kw)})"


class _HasSubstring(ColumnElement):
    type = Boolean()
    _is_implicitly_boolean = True  # a condition as it is (no "= 1" where booleans are integers)
    inherit_cache = True
    _traverse_internals = [("text", InternalTraversal.dp_clauseelement),
                           ("needle", InternalTraversal.dp_clauseelement)]

    def __init__(self, expression, needle: str) -> None:
        self.text = _Ordered(expression)
        self.needle = bindparam(None, needle, type_=String)


def has_substring(expression, needle: str) -> ColumnElement:
    """``needle`` occurs in the text ``expression`` (as Python's ``in``; LIKE would fold case on
    SQLite and take ``%`` and ``_`` as wildcards)."""
    return _HasSubstring(expression, needle)


@compiles(_HasSubstring)
def _has_substring_default(element, compiler, **kw):
    return f"(instr({compiler.process(element.text, **kw)}, {compiler.process(element.needle, **kw)}) > 0)"


@compiles(_HasSubstring, "postgresql")
def _has_substring_postgresql(element, compiler, **kw):
    return f"(strpos({compiler.process(element.text, **kw)}, {compiler.process(element.needle, **kw)}) > 0)"
