"""Schema migrations: the only way the schema is created or changed."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig

from nefos.db.session import Database

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to ``revision`` on an open Database (runs inside its engine)."""

    def _upgrade(connection):
        cfg = alembic_config(db.url)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(_upgrade)
