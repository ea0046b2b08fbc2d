"""routers and floating IPs (Networking API L3)

Revision ID: 0006
Revises: 0005
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('floatingips',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('floating_network_id', sa.String(length=36), nullable=False),
    sa.Column('floating_ip_address', sa.String(length=64), nullable=False),
    sa.Column('floating_port_id', sa.String(length=36), nullable=False),
    sa.Column('fixed_port_id', sa.String(length=36), nullable=True),
    sa.Column('fixed_ip_address', sa.String(length=64), nullable=True),
    sa.Column('router_id', sa.String(length=36), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('floating_network_id', 'fixed_port_id', 'fixed_ip_address')
    )
    with op.batch_alter_table('floatingips', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_floatingips_fixed_port_id'), ['fixed_port_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_floatingips_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_floatingips_router_id'), ['router_id'], unique=False)

    op.create_table('routers',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('admin_state_up', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('gw_network_id', sa.String(length=36), nullable=True),
    sa.Column('gw_port_id', sa.String(length=36), nullable=True),
    sa.Column('enable_snat', sa.Boolean(), nullable=False),
    sa.Column('routes', sa.JSON(), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('routers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_routers_project_id'), ['project_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('routers', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_routers_project_id'))

    op.drop_table('routers')
    with op.batch_alter_table('floatingips', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_floatingips_router_id'))
        batch_op.drop_index(batch_op.f('ix_floatingips_project_id'))
        batch_op.drop_index(batch_op.f('ix_floatingips_fixed_port_id'))

    op.drop_table('floatingips')
