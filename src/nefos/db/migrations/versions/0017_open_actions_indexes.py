"""indexes on the open actions and steps: the conductor's pass over the actions nothing will finish
reads the open ones (instance_actions.finish_time), and a restarting compute host finds the steps its
killed process left open (instance_actions_events (host, finish_time)), not every row ever recorded

Revision ID: 0017
Revises: 0016
"""
from alembic import op


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_instance_actions_finish_time', 'instance_actions', ['finish_time'])
    op.create_index('ix_instance_actions_events_host_finish_time', 'instance_actions_events',
                    ['host', 'finish_time'])


def downgrade() -> None:
    op.drop_index('ix_instance_actions_events_host_finish_time', table_name='instance_actions_events')
    op.drop_index('ix_instance_actions_finish_time', table_name='instance_actions')
