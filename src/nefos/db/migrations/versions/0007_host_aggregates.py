"""host aggregates (aggregates, aggregate_hosts, aggregate_metadata; rows hard-deleted as in Nova's API database)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 08:11:01.765997
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('aggregates',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    sa.UniqueConstraint('uuid')
    )
    op.create_table('aggregate_hosts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('aggregate_id', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['aggregate_id'], ['aggregates.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('host', 'aggregate_id')
    )
    with op.batch_alter_table('aggregate_hosts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_aggregate_hosts_aggregate_id'), ['aggregate_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_aggregate_hosts_host'), ['host'], unique=False)

    op.create_table('aggregate_metadata',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('aggregate_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['aggregate_id'], ['aggregates.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('aggregate_id', 'key')
    )
    with op.batch_alter_table('aggregate_metadata', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_aggregate_metadata_aggregate_id'), ['aggregate_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_aggregate_metadata_key'), ['key'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('aggregate_metadata', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_aggregate_metadata_key'))
        batch_op.drop_index(batch_op.f('ix_aggregate_metadata_aggregate_id'))

    op.drop_table('aggregate_metadata')
    with op.batch_alter_table('aggregate_hosts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_aggregate_hosts_host'))
        batch_op.drop_index(batch_op.f('ix_aggregate_hosts_aggregate_id'))

    op.drop_table('aggregate_hosts')
    op.drop_table('aggregates')
