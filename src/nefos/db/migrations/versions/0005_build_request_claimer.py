"""build requests name the conductor process that claimed them; instances indexed by deletion time

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('build_requests', sa.Column('claimed_by', sa.String(length=255), nullable=True))
    op.create_index('ix_instances_deleted_at', 'instances', ['deleted_at'])


def downgrade() -> None:
    op.drop_index('ix_instances_deleted_at', table_name='instances')
    op.drop_column('build_requests', 'claimed_by')
