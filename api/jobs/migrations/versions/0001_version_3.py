"""Version 3: jobs and items, as the store had them before Alembic (``PRAGMA user_version`` 3).

A SQLite file written by that code is not migrated by this revision: it is given what version 3
had (``api.jobs.sqlite.bring_to_version_3``) and stamped with it. A new database (SQLite or
Postgres) is created here. Request, result and error columns are ``TEXT`` on SQLite, as version 3
declared them (SQLite keeps a compressed blob in them all the same), and ``bytea`` on Postgres,
which keeps one type per column.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_JSON = sa.Text().with_variant(sa.LargeBinary(), "postgresql")


def upgrade() -> None:
    """Create ``jobs`` and ``items`` with version 3's columns and indexes."""
    op.create_table(
        "jobs",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False, server_default="grade"),
        sa.Column("options", sa.Text, nullable=False, server_default="{}"),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("invalid", sa.Integer, nullable=False),
        sa.Column("done", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("scored", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("unscored", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_seq", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("overrides", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("config_hash", sa.Text, nullable=False),
        sa.Column("detail", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("run_started_at", sa.Float),
        sa.Column("run_start_done", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("lease_owner", sa.Text),
        sa.Column("lease_expires", sa.Float, nullable=False, server_default=sa.text("0")),
        sa.Column("bytes", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("request_dict", sa.LargeBinary),
        sa.Column("result_dict", sa.LargeBinary),
    )
    op.create_index("jobs_claimable", "jobs", ["status", "created_at"])
    op.create_index("jobs_by_owner", "jobs", ["owner", "status"])
    op.create_table(
        "items",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("item_id", sa.Text),
        sa.Column("line", sa.Integer),
        sa.Column("request", _JSON),
        sa.Column("error", _JSON),
        sa.Column("result", _JSON),
        sa.Column("status", sa.Text),
        sa.Column("seq", sa.Integer),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "items_by_seq", "items", ["job_id", "seq"],
        sqlite_where=sa.text("seq IS NOT NULL"), postgresql_where=sa.text("seq IS NOT NULL"),
    )


def downgrade() -> None:
    """Not supported: the job store migrates forward only (restore a backup to go back)."""
    raise NotImplementedError("the job store migrates forward only; restore a backup instead")
