"""The list engine pages in SQL on every supported database: walking the pages after each marker,
forwards or reversed, gives every row once in the order Python sorts them (NULL lowest, text by
code point, the id closing ties); the JSON matches find a tag or a property by its literal text."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import delete, select

from nefos.db import codepoint, json_match, listing
from nefos.db.models import Image
from tests.backends import BACKENDS, fresh_database, migrated

NAMES = [None, "b", "a", "b", None, "B", "é", "a", "c"]


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'nefos.sqlite'}"


@pytest.fixture(scope="module")
def postgresql_url():
    with fresh_database("postgresql") as url:
        yield url


@pytest.fixture(scope="module")
def mysql_url():
    with fresh_database("mysql") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def db_url(request):
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
async def db(db_url):
    async with migrated(db_url) as database:
        async with database.transaction() as s:
            await s.execute(delete(Image))
            for i, name in enumerate(NAMES):
                s.add(Image(id=f"00000000-0000-4000-8000-{i:012d}", name=name, status="active",
                            visibility="public", size=i % 3 or None, created_at=dt.datetime(2026, 1, 1),
                            tags=["x", 'q"t'] if i % 2 else [], properties={'a."b': "é"} if i % 3 else {}))
        yield database


def python_order(rows: list[tuple], descending: bool) -> list[str]:
    """(name, id) rows as Python sorts them: a missing name lowest, then by id."""
    ranked = sorted(rows, key=lambda r: (r[0] is not None, r[0] or "", r[1]))
    return [r[1] for r in (reversed(ranked) if descending else ranked)]


async def walk(db, keys, *, limit: int, reverse: bool = False) -> list[str]:
    """Every page of ``limit`` rows, each after the last row of the one before."""
    seen, marker = [], None
    while True:
        async with db.reader() as s:
            if marker is not None:
                marker = dict((await s.execute(select(*listing.marker_values(keys)).where(
                    Image.id == marker))).mappings().one())
            rows = (await s.execute(listing.paged(select(Image.id), keys, marker=marker, limit=limit,
                                                  reverse=reverse))).scalars().all()
        page = listing.page_rows(rows, reverse=reverse)
        seen = page + seen if reverse else seen + page
        if len(rows) < limit:
            return seen
        marker = page[0] if reverse else page[-1]


@pytest.mark.parametrize("descending", [False, True])
async def test_the_pages_walk_every_row_once_in_pythons_order(db, descending):
    async with db.reader() as s:
        rows = [tuple(r) for r in (await s.execute(select(Image.name, Image.id))).all()]
    keys = [listing.SortKey("name", codepoint.ordered(Image.name), descending),
            listing.SortKey("id", codepoint.ordered(Image.id), descending)]
    expected = python_order(rows, descending)
    for limit in (1, 2, 4, 100):
        assert await walk(db, keys, limit=limit) == expected
        assert await walk(db, keys, limit=limit, reverse=True) == expected


async def test_json_matches_find_the_literal_text(db):
    async def ids(condition) -> set[str]:
        async with db.reader() as s:
            return set((await s.execute(select(Image.id).where(condition))).scalars())

    odd = {f"00000000-0000-4000-8000-{i:012d}" for i in range(len(NAMES)) if i % 2}
    with_property = {f"00000000-0000-4000-8000-{i:012d}" for i in range(len(NAMES)) if i % 3}
    assert await ids(json_match.array_has(Image.tags, "x")) == odd
    assert await ids(json_match.array_has(Image.tags, 'q"t')) == odd
    assert await ids(json_match.array_has(Image.tags, "q")) == set()
    assert await ids(json_match.object_has(Image.properties, 'a."b', "é")) == with_property
    assert await ids(json_match.object_has(Image.properties, "a", "é")) == set()
    assert await ids(json_match.object_has(Image.properties, 'a."b', "e")) == set()
