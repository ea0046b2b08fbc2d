"""server tags, trusted image certificates and scheduler hints on instances (Compute API 2.52, 2.63, 2.100)

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tags', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('trusted_certs', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('scheduler_hints', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('scheduler_hints')
        batch_op.drop_column('trusted_certs')
        batch_op.drop_column('tags')
