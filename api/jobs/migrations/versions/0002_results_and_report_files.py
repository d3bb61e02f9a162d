"""Results in their own table (each written once, by constraint), and report files in the store.

``results`` holds one row per finished entry, keyed ``(job_id, idx)``: a second result for an
item is refused by the primary key (``INSERT ... ON CONFLICT DO NOTHING``), and ``seq``, the
finishing order, is unique per job. The entries version 3 kept in ``items`` (result, status,
seq; an invalid item's entry had only a seq) move there, and those columns leave ``items``.

``report_files`` keeps a calibration run's files (report, plots, mappings, uploaded set) in the
database, so every replica serves them.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_PACKED = sa.LargeBinary()


def upgrade() -> None:
    """Create ``results`` and ``report_files``; move version 3's entries into ``results``."""
    op.create_table(
        "results",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("result", _PACKED),
        sa.Column("size", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.ForeignKeyConstraint(
            ["job_id", "idx"], ["items.job_id", "items.idx"], name="results_item",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("job_id", "seq", name="results_seq"),
    )
    # Stored bytes as the quota counted them: a text row's UTF-8 length, a blob's length.
    size = (
        "octet_length(result)" if op.get_bind().dialect.name == "postgresql"
        else "length(CAST(result AS BLOB))"
    )
    op.execute(
        "INSERT INTO results (job_id, idx, seq, status, result, size)"
        f" SELECT job_id, idx, seq, COALESCE(status, 'invalid'), result, COALESCE({size}, 0)"
        " FROM items WHERE seq IS NOT NULL"
    )
    op.drop_index("items_by_seq", table_name="items")
    for column in ("result", "status", "seq"):
        op.drop_column("items", column)
    op.create_table(
        "report_files",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    """Not supported: the job store migrates forward only (restore a backup to go back)."""
    raise NotImplementedError("the job store migrates forward only; restore a backup instead")
