"""Writing the Identity API's named rows (domains, projects, users, roles): a name unique in its
scope, answered with Keystone's conflict whether the check before the write or the unique index
at its commit finds it taken; and what domains and projects share (Keystone keeps a domain as a
project with ``is_domain``; here they are two tables of one shape): a description, tags, and an
enabled flag whose clearing revokes the tokens scoped to the row."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from nefos.clients.identity import tokens
from nefos.control.identity import core
from nefos.control.identity.request_input import valid_bool, valid_name, valid_tags, valid_text
from nefos.control.identity.rest.http import conflict


@contextlib.asynccontextmanager
async def writing(rt, kind: str, name: Any) -> AsyncIterator[Any]:
    """A write transaction (``core.write``) in which a ``kind`` named ``name`` that another write
    stored meanwhile (the unique index finds it at the commit) is Keystone's conflict as well."""
    try:
        async with core.write(rt) as s:
            yield s
    except IntegrityError:
        raise conflict(kind, "name", str(name))


async def check_name_free(s, model, kind: str, name: str, **scope) -> None:
    """Keystone's conflict when another ``model`` row has ``name`` (in the same ``scope`` columns)."""
    q = select(model.id).where(model.name == name,
                               *(getattr(model, column) == value for column, value in scope.items()))
    if (await s.execute(q)).first():
        raise conflict(kind, "name", name)


async def rename(s, row, body: dict, kind: str, **scope) -> bool:
    """The body's new name for ``row`` (a ``kind``), if it gives another, checked and free in
    ``scope``; whether the name changed."""
    if "name" not in body or body["name"] == row.name:
        return False
    name = valid_name(body["name"], kind)
    await check_name_free(s, type(row), kind, name, **scope)
    row.name = name
    return True


def new_domain_or_project(model, body: dict, name: str):
    """A new ``model`` row named ``name`` (read first by the caller) with the body's description,
    enabled flag and tags."""
    return model(id=core.new_id(), name=name, description=valid_text(body.get("description"), "description"),
                 enabled=valid_bool(body.get("enabled", True), "enabled"), tags=valid_tags(body.get("tags")))


async def update_domain_or_project(s, row, body: dict, kind: str, **scope) -> None:
    """The body's name (free in ``scope``), description, tags and enabled flag on ``row``, a
    ``kind``; disabling it revokes the tokens scoped to it."""
    await rename(s, row, body, kind, **scope)
    if "description" in body:
        row.description = valid_text(body["description"], "description")
    if "tags" in body:
        row.tags = valid_tags(body["tags"])
    if "enabled" in body:
        enabled = valid_bool(body["enabled"], "enabled")
        if row.enabled and not enabled:
            tokens.add_revocation_event(s, **{f"{kind}_id": row.id})
        row.enabled = enabled
    await s.flush()
