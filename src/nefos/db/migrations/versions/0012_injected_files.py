"""the files injected into a server (personality, Compute API before 2.57)

Nova hands them to the driver at build and rebuild only; Nefos keeps them so that the metadata
service can serve them too, not only the config drive.

Revision ID: 0012
Revises: 0011
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('injected_files', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_column('injected_files')
