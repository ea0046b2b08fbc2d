"""Write the next migration from what the models add to the migrated schema.

Run after changing nefos/db/models.py:  python scripts/regen_migration.py "what changed"
It migrates an empty SQLite database to the current head, lets Alembic compare it with the
models, and writes ``<next number>_<message>.py`` under nefos/db/migrations/versions/ (review it:
keep it portable to SQLite, PostgreSQL and MySQL). tests/test_migrations.py fails while the
migrations and the models disagree. Databases already in use keep their applied revisions, so
released migrations are never rewritten.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory

from nefos.db.migrate import MIGRATIONS_DIR, alembic_config, upgrade
from nefos.db.session import Database

message = " ".join(sys.argv[1:]) or "schema change"
with tempfile.TemporaryDirectory() as tmp:
    url = f"sqlite:///{Path(tmp) / 'head.sqlite'}"
    db = Database(url)
    asyncio.run(upgrade(db))
    asyncio.run(db.dispose())
    cfg = alembic_config(url)
    head = ScriptDirectory.from_config(cfg).get_current_head()
    rev_id = f"{int(head) + 1:04d}"
    script = command.revision(cfg, message=message, autogenerate=True, rev_id=rev_id)
    print("wrote", script.path)
