"""tasks: jobs on the cluster that are not training runs, and their tokens

Revision ID: 0002_14
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_14"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("key", sa.String(length=256), nullable=True),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested", sa.String(length=16), nullable=True),
        sa.Column("handle", sa.JSON(), nullable=True),
        sa.Column("launch_tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("stop_sent", sa.Boolean(), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("reported", sa.Boolean(), nullable=False),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["project"], ["projects.name"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tasks_key", "tasks", ["key"], unique=False)
    op.create_index("ix_tasks_state", "tasks", ["state"], unique=False)
    op.create_index(op.f("ix_tasks_project"), "tasks", ["project"], unique=False)
    op.create_index(op.f("ix_tasks_run_id"), "tasks", ["run_id"], unique=False)
    op.add_column("tokens", sa.Column("task_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("task_id")
    op.drop_index(op.f("ix_tasks_run_id"), table_name="tasks")
    op.drop_index(op.f("ix_tasks_project"), table_name="tasks")
    op.drop_index("ix_tasks_state", table_name="tasks")
    op.drop_index("ix_tasks_key", table_name="tasks")
    op.drop_table("tasks")
