"""Test runtimes on a SQLite database the migrations made once per test process.

The first runtime a test process opens runs every Alembic migration into a template file; each
runtime after it starts from a copy of that file in its own state directory instead of migrating
again. A copy is exactly what the migrations produced (``tests/test_migrations.py`` checks the
migrations themselves). Runtimes on a server database (``database_url`` set) migrate as before.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from nefos import fileperms
from nefos.config import Config
from nefos.service import Runtime

_template: Path | None = None


async def _migrated_template() -> Path:
    global _template
    if _template is None:
        from tests.backends import migrated
        where = Path(tempfile.mkdtemp(prefix=f"nefos-schema-{os.getpid()}-"))
        atexit.register(shutil.rmtree, where, True)
        building = where / "building.sqlite"
        async with migrated(f"sqlite:///{building}"):
            pass
        # Disposed: SQLite folded its write-ahead log into the file, which is now whole.
        assert not building.with_name(building.name + "-wal").exists()
        template = where / "migrated.sqlite"
        os.replace(building, template)
        _template = template
    return _template


async def open_runtime(cfg: Config) -> Runtime:
    """``Runtime.open(cfg, migrate=True)``, from a copy of the migrated template when ``cfg``'s
    database is a new SQLite file."""
    if cfg.database_url or cfg.sqlite_path.exists():
        return await Runtime.open(cfg, migrate=True)
    template = await _migrated_template()
    fileperms.passable_dir(cfg.state_dir)  # as Runtime.open makes it
    shutil.copyfile(template, cfg.sqlite_path)
    return await Runtime.open(cfg)
