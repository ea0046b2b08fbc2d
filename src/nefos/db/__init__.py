"""Shared persistence: SQLAlchemy 2 async models, the engine and Alembic migrations."""
