"""migrations: each resize and cold migration, with Nova's columns (os-migrations)

Revision ID: 0008
Revises: 0007
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('migrations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('instance_uuid', sa.String(length=36), nullable=False),
    sa.Column('migration_type', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=255), nullable=False),
    sa.Column('source_compute', sa.String(length=255), nullable=True),
    sa.Column('source_node', sa.String(length=255), nullable=True),
    sa.Column('dest_compute', sa.String(length=255), nullable=True),
    sa.Column('dest_node', sa.String(length=255), nullable=True),
    sa.Column('dest_host', sa.String(length=255), nullable=True),
    sa.Column('old_instance_type_id', sa.Integer(), nullable=True),
    sa.Column('new_instance_type_id', sa.Integer(), nullable=True),
    sa.Column('hidden', sa.Boolean(), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=True),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('memory_total', sa.BigInteger(), nullable=True),
    sa.Column('memory_processed', sa.BigInteger(), nullable=True),
    sa.Column('memory_remaining', sa.BigInteger(), nullable=True),
    sa.Column('disk_total', sa.BigInteger(), nullable=True),
    sa.Column('disk_processed', sa.BigInteger(), nullable=True),
    sa.Column('disk_remaining', sa.BigInteger(), nullable=True),
    sa.Column('deleted_at', sa.DateTime(), nullable=True),
    sa.Column('deleted', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('migrations', schema=None) as batch_op:
        batch_op.create_index('ix_migrations_created_at', ['created_at'], unique=False)
        batch_op.create_index('ix_migrations_instance_uuid_status', ['instance_uuid', 'status'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('migrations', schema=None) as batch_op:
        batch_op.drop_index('ix_migrations_instance_uuid_status')
        batch_op.drop_index('ix_migrations_created_at')

    op.drop_table('migrations')
