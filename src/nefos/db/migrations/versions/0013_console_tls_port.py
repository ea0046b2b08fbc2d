"""console auth tokens' TLS port (spice-direct consoles, Compute API 2.99)

Revision ID: 0013
Revises: 0012
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('console_auth_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tls_port', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('console_auth_tokens', schema=None) as batch_op:
        batch_op.drop_column('tls_port')
