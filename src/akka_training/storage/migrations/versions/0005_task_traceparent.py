"""task traceparent: an evaluation's job joins the trace of its submission

Revision ID: 0005_evtel
Revises: 0004_h22_rest
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_evtel"
down_revision = "0004_h22_rest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("traceparent")
