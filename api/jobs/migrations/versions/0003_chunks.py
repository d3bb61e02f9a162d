"""Leases per chunk of a job's items, not per job: every replica works on every running job.

``chunks`` holds one row per chunk, keyed ``(job_id, lo)``: the items ``lo <= idx < hi`` of a
grading job (64 at a time), or the whole job for the other kinds (one chunk), each with its own
lease (``lease_owner``, ``lease_expires``) and a ``done`` flag. The job's own lease columns go:
a job is held while any of its chunks is.

Existing jobs get their chunks here: an unfinished job's chunks carry the job's lease (a
process still running it keeps it until the lease lapses), a finished job's are done (a
``retry-unscored`` opens them again).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_CHUNK_ITEMS = 64  # the store's CHUNK_ITEMS when this revision was written (boundaries are rows)
_GRADE = "grade"
_ACTIVE = ("queued", "running")


def upgrade() -> None:
    """Create ``chunks``, give every job its chunks (and its lease), drop the job's lease."""
    chunks = op.create_table(
        "chunks",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("lo", sa.Integer, primary_key=True),
        sa.Column("hi", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.Text),
        sa.Column("lease_expires", sa.Float, nullable=False, server_default=sa.text("0")),
        sa.Column("done", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="chunks_job", ondelete="CASCADE"),
    )
    op.create_index("chunks_by_lease", "chunks", ["lease_owner"])
    bind = op.get_bind()
    jobs = bind.execute(sa.text(
        "SELECT j.id, j.kind, j.status, j.lease_owner, j.lease_expires,"
        " (SELECT COALESCE(MAX(i.idx) + 1, 0) FROM items i WHERE i.job_id = j.id) AS n"
        " FROM jobs j"
    )).all()
    rows = []
    for job in jobs:
        active = job.status in _ACTIVE
        n = int(job.n)
        step = _CHUNK_ITEMS if job.kind == _GRADE and n else max(n, 1)
        for lo in range(0, max(n, 1), step):
            rows.append({
                "job_id": job.id, "lo": lo, "hi": max(min(lo + step, n), lo + 1),
                "lease_owner": job.lease_owner if active else None,
                "lease_expires": float(job.lease_expires or 0.0) if active else 0.0,
                "done": not active,
            })
    if rows:
        op.bulk_insert(chunks, rows)
    for column in ("lease_owner", "lease_expires"):
        op.drop_column("jobs", column)


def downgrade() -> None:
    """Not supported: the job store migrates forward only (restore a backup to go back)."""
    raise NotImplementedError("the job store migrates forward only; restore a backup instead")
