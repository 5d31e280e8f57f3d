"""Usage per turn (LLM tokens, model calls, seconds, cost) and per-server settings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-08-25 00:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "usage_turns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("conversation", sa.String(800), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("llm_model", sa.String(255), nullable=True),
        sa.Column("llm_host", sa.String(255), nullable=True),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("llm_cost_micro_usd", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_turns")),
        sa.UniqueConstraint("request_id", name=op.f("uq_usage_turns_request_id")),
    )
    op.create_index(op.f("ix_usage_turns_created_at"), "usage_turns", ["created_at"])
    op.create_index(
        "ix_usage_turns_server_created_at", "usage_turns", ["platform", "server", "created_at"]
    )
    op.create_index(
        "ix_usage_turns_user_created_at", "usage_turns", ["platform", "user_id", "created_at"]
    )
    op.create_table(
        "usage_model_calls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("backend", sa.String(16), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("cost_micro_usd", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["turn_id"],
            ["usage_turns.id"],
            name=op.f("fk_usage_model_calls_turn_id_usage_turns"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_model_calls")),
    )
    op.create_index(op.f("ix_usage_model_calls_turn_id"), "usage_model_calls", ["turn_id"])
    op.create_table(
        "server_settings",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("platform", "server", name=op.f("pk_server_settings")),
    )


def downgrade() -> None:
    op.drop_table("server_settings")
    op.drop_index(op.f("ix_usage_model_calls_turn_id"), table_name="usage_model_calls")
    op.drop_table("usage_model_calls")
    op.drop_index("ix_usage_turns_user_created_at", table_name="usage_turns")
    op.drop_index("ix_usage_turns_server_created_at", table_name="usage_turns")
    op.drop_index(op.f("ix_usage_turns_created_at"), table_name="usage_turns")
    op.drop_table("usage_turns")
