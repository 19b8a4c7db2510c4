"""task claims: a claim on a pool's devices may be held by a task (an evaluation) instead of a run

Revision ID: 0004_h22_rest
Revises: 0003_19
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_h22_rest"
down_revision = "0003_19"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=True)
        batch.add_column(sa.Column("task_id", sa.String(length=32), nullable=True))
        batch.create_foreign_key("fk_claims_task_id_tasks", "tasks", ["task_id"], ["id"])
        batch.create_index("ix_claims_task_id", ["task_id"], unique=False)


def downgrade() -> None:
    op.execute("DELETE FROM claims WHERE run_id IS NULL")
    with op.batch_alter_table("claims") as batch:
        batch.drop_index("ix_claims_task_id")
        batch.drop_constraint("fk_claims_task_id_tasks", type_="foreignkey")
        batch.drop_column("task_id")
        batch.alter_column("run_id", existing_type=sa.String(length=32), nullable=False)
