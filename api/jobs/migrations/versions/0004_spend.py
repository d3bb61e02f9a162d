"""What judge calls spend, kept in the store: per API key and UTC day, and per job (issue 32).

``key_spend`` holds one row per ``(owner, day)`` (``day`` is the UTC date, ``YYYY-MM-DD``): the
USD and the provider requests the key's judge calls cost that day, added to as they settle, so a
key's budget (``max_cost_per_key_usd``) survives a restart and is shared by replicas. ``jobs``
gains ``cost_usd`` (what the job's calls cost, for its own ``max_cost``) and ``paused_until``
(a job paused at a budget is not claimed before then; null: not paused).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``key_spend``; add ``cost_usd`` and ``paused_until`` to ``jobs``."""
    op.create_table(
        "key_spend",
        sa.Column("owner", sa.Text, primary_key=True),
        sa.Column("day", sa.Text, primary_key=True),
        sa.Column("cost_usd", sa.Float, nullable=False, server_default=sa.text("0")),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    # Plain ADD COLUMNs (a constant default): SQLite adds them without copying the table.
    op.add_column(
        "jobs", sa.Column("cost_usd", sa.Float, nullable=False, server_default=sa.text("0"))
    )
    op.add_column("jobs", sa.Column("paused_until", sa.Float))


def downgrade() -> None:
    """Not supported: the job store migrates forward only (restore a backup to go back)."""
    raise NotImplementedError("the job store migrates forward only; restore a backup instead")
