"""Regenerate the initial migration from the models (allowed until the first release).

Run after changing nefos/db/models.py:  python scripts/regen_migration.py
tests/test_migrations.py fails when the migration and the models disagree.
"""

import os
import tempfile
from pathlib import Path

from alembic import command

from nefos.db.migrate import MIGRATIONS_DIR, alembic_config

initial = MIGRATIONS_DIR / "versions" / "0001_initial_schema.py"
if initial.exists():
    initial.unlink()
with tempfile.TemporaryDirectory() as tmp:
    cfg = alembic_config(f"sqlite:///{Path(tmp) / 'empty.sqlite'}")
    command.revision(cfg, message="initial schema", autogenerate=True, rev_id="0001")
print("regenerated", initial)
