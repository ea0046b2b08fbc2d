"""The migrations and the models agree: migrating an empty database gives the schema
the models describe (run ``python scripts/regen_migration.py "what changed"`` after changing a model)."""

from __future__ import annotations

import pprint

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from nefos.db.migrate import alembic_config, upgrade
from nefos.db.models import Base
from nefos.db.session import Database


def _compare(connection):
    ctx = MigrationContext.configure(connection, opts={"compare_type": True,
                                                       "compare_server_default": True})
    return ctx.get_current_revision(), compare_metadata(ctx, Base.metadata)


async def test_migrated_schema_matches_the_models(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'migrated.sqlite'}")
    try:
        await upgrade(db)
        async with db.engine.connect() as conn:
            revision, diff = await conn.run_sync(_compare)
    finally:
        await db.dispose()
    heads = ScriptDirectory.from_config(alembic_config(db.url)).get_heads()
    assert [revision] == heads
    assert diff == [], "models and migrations disagree; run scripts/regen_migration.py:\n" + \
        pprint.pformat(diff)


async def test_upgrade_is_idempotent(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'twice.sqlite'}")
    try:
        await upgrade(db)
        await upgrade(db)
        async with db.engine.connect() as conn:
            revision, diff = await conn.run_sync(_compare)
    finally:
        await db.dispose()
    assert revision is not None and diff == []


def test_migration_history_is_linear():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1, "more than one migration head"
    assert len(script.get_bases()) == 1
