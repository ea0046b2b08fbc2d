"""networks' segments: network type and segmentation id (VXLAN VNI); L2 agents' tunneling IPs

Revision ID: 0014
Revises: 0013
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Networks made before carry on as they were: on one host, no VNI.
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('network_type', sa.String(length=16), nullable=False, server_default='local'))
        batch_op.add_column(sa.Column('segmentation_id', sa.Integer(), nullable=True))
        batch_op.create_unique_constraint('uq_networks_segment', ['network_type', 'segmentation_id'])
    with op.batch_alter_table('network_agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tunneling_ip', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('network_agents', schema=None) as batch_op:
        batch_op.drop_column('tunneling_ip')
    with op.batch_alter_table('networks', schema=None) as batch_op:
        batch_op.drop_constraint('uq_networks_segment', type_='unique')
        batch_op.drop_column('segmentation_id')
        batch_op.drop_column('network_type')
