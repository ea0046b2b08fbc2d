"""Keystone's user resource options (identity_users.options)

Revision ID: 0020
Revises: 0019
"""
from alembic import op
import sqlalchemy as sa


revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('identity_users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('options', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('identity_users', schema=None) as batch_op:
        batch_op.drop_column('options')
