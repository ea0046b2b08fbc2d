"""an index on instances (vm_state, deleted): every compute host's periodic look for RESIZED
servers it is the source of reads only those, not every live instance of the cloud

Revision ID: 0016
Revises: 0015
"""
from alembic import op


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_instances_vm_state_deleted', 'instances', ['vm_state', 'deleted'])


def downgrade() -> None:
    op.drop_index('ix_instances_vm_state_deleted', table_name='instances')
