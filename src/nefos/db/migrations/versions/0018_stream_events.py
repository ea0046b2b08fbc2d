"""the event stream's durable log (stream_events), and services.reported_up: the up or down state
the log last told of each compute host

Revision ID: 0018
Revises: 0017
"""
from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'stream_events',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), primary_key=True,
                  autoincrement=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('type', sa.String(length=64), nullable=False),
        sa.Column('server_id', sa.String(length=36), nullable=True),
        sa.Column('host', sa.String(length=255), nullable=True),
        sa.Column('name', sa.String(length=255), nullable=True),
        sa.Column('data', sa.JSON(), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index('ix_stream_events_created_at', 'stream_events', ['created_at'])
    with op.batch_alter_table('services', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reported_up', sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('services', schema=None) as batch_op:
        batch_op.drop_column('reported_up')
    op.drop_index('ix_stream_events_created_at', table_name='stream_events')
    op.drop_table('stream_events')
