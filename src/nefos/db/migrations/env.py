"""Alembic environment: runs migrations over the async engine of the configured URL."""

import asyncio

from alembic import context
from sqlalchemy.ext.asyncio import create_async_engine

from nefos.db.models import Base
from nefos.db.session import normalise_url

config = context.config
target_metadata = Base.metadata


def _run(connection):
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async():
    engine = create_async_engine(normalise_url(config.get_main_option("sqlalchemy.url")))
    async with engine.connect() as conn:
        await conn.run_sync(_run)
        await conn.commit()
    await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_async())
