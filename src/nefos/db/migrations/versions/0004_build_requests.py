"""build requests: the API's durable hand-off of a build to the conductor

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'build_requests',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('instance_uuids', sa.JSON(), nullable=False),
        sa.Column('request_spec', sa.JSON(), nullable=False),
        sa.Column('build_args', sa.JSON(), nullable=False),
        sa.Column('context', sa.JSON(), nullable=False),
        sa.Column('dispatched', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('claimed_until', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_build_requests_created_at', 'build_requests', ['created_at'])


def downgrade() -> None:
    op.drop_index('ix_build_requests_created_at', table_name='build_requests')
    op.drop_table('build_requests')
