"""the auto-allocated topology (Networking API auto-allocated-topology, Compute API networks "auto")

Neutron's ``externalnetworks.is_default`` (here a column of the network) and its
``auto_allocated_topologies``: a project's network and router, one per project.

Revision ID: 0011
Revises: 0010
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_default', sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_table('auto_allocated_topologies',
    sa.Column('project_id', sa.String(length=255), nullable=False),
    sa.Column('network_id', sa.String(length=36), nullable=False),
    sa.Column('router_id', sa.String(length=36), nullable=True),
    sa.ForeignKeyConstraint(['network_id'], ['networks.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['router_id'], ['routers.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('project_id')
    )
    with op.batch_alter_table('auto_allocated_topologies', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_auto_allocated_topologies_network_id'), ['network_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('auto_allocated_topologies', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_auto_allocated_topologies_network_id'))
    op.drop_table('auto_allocated_topologies')
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.drop_column('is_default')
