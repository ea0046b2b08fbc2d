"""Conditions on JSON columns that every backend evaluates in SQL: an array holds a string, an
object maps a key to a string.

Each backend has its own form (SQLite walks the document with ``json_each``, PostgreSQL tests
``jsonb`` containment, MySQL ``JSON_CONTAINS``); the key and value are always bound parameters,
never spliced into a JSON path, so any text a caller sends is matched literally. A NULL column
holds nothing.
"""

from __future__ import annotations

import json

from sqlalchemy import Boolean, String, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal


class _JsonMatch(ColumnElement):
    type = Boolean()
    _is_implicitly_boolean = True  # a condition as it is (no "= 1" where booleans are integers)
    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("key", InternalTraversal.dp_clauseelement),
                           ("value", InternalTraversal.dp_clauseelement),
                           ("document", InternalTraversal.dp_clauseelement)]

    def __init__(self, column, key: str | None, value: str, document) -> None:
        self.column = column
        self.key = bindparam(None, key or "", type_=String)  # an array's match has none
        self.value = bindparam(None, value, type_=String)
        # The same match as a JSON document, for the backends that test containment.
        self.document = bindparam(None, json.dumps(document), type_=String)


class ArrayHas(_JsonMatch):
    inherit_cache = True


class ObjectHas(_JsonMatch):
    inherit_cache = True


def array_has(column, value: str) -> ColumnElement:
    """``column`` (a JSON array) holds the string ``value``."""
    return ArrayHas(column, None, value, [value])


def object_has(column, key: str, value: str) -> ColumnElement:
    """``column`` (a JSON object) maps ``key`` to the string ``value``."""
    return ObjectHas(column, key, value, {key: value})


@compiles(ArrayHas, "sqlite")
def _array_has_sqlite(element, compiler, **kw):
    return (f"EXISTS (SELECT 1 FROM json_each({compiler.process(element.column, **kw)}) AS jm "
            f"WHERE jm.type = 'text' AND jm.value = {compiler.process(element.value, **kw)})")


@compiles(ObjectHas, "sqlite")
def _object_has_sqlite(element, compiler, **kw):
    return (f"EXISTS (SELECT 1 FROM json_each({compiler.process(element.column, **kw)}) AS jm "
            f"WHERE jm.key = {compiler.process(element.key, **kw)} AND jm.type = 'text' "
            f"AND jm.value = {compiler.process(element.value, **kw)})")


@compiles(ArrayHas, "postgresql")
@compiles(ObjectHas, "postgresql")
def _contains_postgresql(element, compiler, **kw):
    return (f"(CAST({compiler.process(element.column, **kw)} AS JSONB) @> "
            f"CAST({compiler.process(element.document, **kw)} AS JSONB))")


@compiles(ArrayHas)
@compiles(ObjectHas)
def _contains_mysql(element, compiler, **kw):
    """MySQL's (and MariaDB's) form, the default."""
    return (f"COALESCE(JSON_CONTAINS({compiler.process(element.column, **kw)}, "
            f"{compiler.process(element.document, **kw)}), 0) = 1")
