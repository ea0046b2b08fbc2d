"""A test runtime opened from the per-process migrated template has exactly the schema (and the
Alembic revision) a fresh run of every migration makes, and a database of its own."""

from __future__ import annotations

import sqlite3

from nefos.config import load_config
from nefos.service import Runtime
from tests.schema import open_runtime


def _schema(path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    return [*objects, ("revision", *revision)]


async def test_a_runtime_from_the_template_has_the_schema_the_migrations_make(tmp_path):
    migrated = await Runtime.open(load_config(state_dir=tmp_path / "migrated", auth_strategy="noauth"),
                                  migrate=True)
    copies = [await open_runtime(load_config(state_dir=tmp_path / f"copy-{i}", auth_strategy="noauth"))
              for i in range(2)]
    for rt in (migrated, *copies):
        await rt.close()
    expected = _schema(migrated.cfg.sqlite_path)
    assert len(expected) > 20
    for rt in copies:
        assert _schema(rt.cfg.sqlite_path) == expected
    assert copies[0].cfg.sqlite_path != copies[1].cfg.sqlite_path
