"""the availability zone a server is pinned to (Compute API 2.77, 2.91, 2.96, 2.104)

Nova keeps it in the request spec: the zone asked for on create (or on unshelve),
apart from the zone of the host the server is on.

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pinned_availability_zone', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('pinned_availability_zone')
