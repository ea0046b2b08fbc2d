"""console auth tokens (remote consoles)

Revision ID: 0009
Revises: 0008
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('console_auth_tokens',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('token_hash', sa.String(length=255), nullable=False),
    sa.Column('console_type', sa.String(length=255), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('port', sa.Integer(), nullable=False),
    sa.Column('internal_access_path', sa.String(length=255), nullable=True),
    sa.Column('instance_uuid', sa.String(length=36), nullable=False),
    sa.Column('expires', sa.Integer(), nullable=False),
    sa.Column('access_url_base', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('console_auth_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_console_auth_tokens_expires'), ['expires'], unique=False)
        batch_op.create_index(batch_op.f('ix_console_auth_tokens_instance_uuid'), ['instance_uuid'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('console_auth_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_console_auth_tokens_instance_uuid'))
        batch_op.drop_index(batch_op.f('ix_console_auth_tokens_expires'))

    op.drop_table('console_auth_tokens')
