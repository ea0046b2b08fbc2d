"""a server's disk configuration, OS-DCF:diskConfig (Nova's instances.auto_disk_config)

AUTO (true) or MANUAL (false), set on create, rebuild, resize and update.

Revision ID: 0010
Revises: 0009
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('auto_disk_config', sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('auto_disk_config')
