"""snapshot sizes: the bytes of a snapshot's adapter and training state in the store

Revision ID: 0003_19
Revises: 0002_14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_19"
down_revision = "0002_14"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.add_column(sa.Column("weights_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("training_state_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("training_state_bytes")
        batch.drop_column("weights_bytes")
