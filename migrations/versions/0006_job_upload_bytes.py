"""Admission by upload bytes: each job's declared upload size.

Revision ID: 0006
Revises: 0005
Create Date: 2026-08-27 00:00:00

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs accepted before this column weigh nothing (text only): at worst a
    # few of them run at once past the byte budget, once, after the upgrade.
    op.add_column(
        "turn_jobs",
        sa.Column("upload_bytes", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("turn_jobs") as batch:
        batch.drop_column("upload_bytes")
