"""tinker sessions: Tinker API sessions, their training and sampling clients, in the database

Revision ID: 0006_h38_sessions
Revises: 0005_evtel
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_h38_sessions"
down_revision = "0005_evtel"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tinker_sessions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.String(length=16), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["project"], ["projects.name"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_tinker_sessions_project"), "tinker_sessions", ["project"], unique=False
    )
    op.create_table(
        "tinker_clients",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.String(length=96), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["session_id"], ["tinker_sessions.id"]),
        sa.PrimaryKeyConstraint("run_id"),
        sa.UniqueConstraint("model_id"),
    )
    op.create_index(
        op.f("ix_tinker_clients_session_id"), "tinker_clients", ["session_id"], unique=False
    )
    op.create_table(
        "tinker_samplers",
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("sampler_id", sa.String(length=512), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["session_id"], ["tinker_sessions.id"]),
        sa.PrimaryKeyConstraint("session_id", "sampler_id"),
    )
    op.create_index(op.f("ix_tinker_samplers_run_id"), "tinker_samplers", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_tinker_samplers_run_id"), table_name="tinker_samplers")
    op.drop_table("tinker_samplers")
    op.drop_index(op.f("ix_tinker_clients_session_id"), table_name="tinker_clients")
    op.drop_table("tinker_clients")
    op.drop_index(op.f("ix_tinker_sessions_project"), table_name="tinker_sessions")
    op.drop_table("tinker_sessions")
