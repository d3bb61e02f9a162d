"""Files kept with a job in the store: a calibration run's report, plots, mappings and input.

A calibration run writes its report into a scratch folder on the replica that runs it; the
finished files are then stored here, keyed ``(job_id, name)``, so any replica serves them, and
retention deletes them with the job. Names are relative POSIX paths (``report.json``,
``mappings/rouge_l.json``). Each file is capped (``MAX_FILE_BYTES``): the store is a database,
not a file server.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, insert, select

from api.jobs.database import Database
from api.jobs.schema import report_files

MAX_FILE_BYTES = 32 * 1024 * 1024
"""Largest file kept in the store (a report of thousands of items is a few megabytes)."""


class StoredFiles:
    """The file operations of the job store (``JobStore`` exposes them).

    Args:
        db: The jobs database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, job_id: str, files: Mapping[str, bytes]) -> None:
        """Store ``files`` of a job in one transaction, replacing any of the same names.

        Raises:
            ValueError: a file is over ``MAX_FILE_BYTES`` (nothing is stored then); callers
                check sizes first and say what they do with a larger file.
        """
        for name, data in files.items():
            if len(data) > MAX_FILE_BYTES:
                raise ValueError(f"{name}: {len(data)} bytes, over the {MAX_FILE_BYTES} kept")
        if not files:
            return
        with self.db.tx() as conn:
            conn.execute(
                delete(report_files).where(
                    report_files.c.job_id == job_id, report_files.c.name.in_(list(files))
                )
            )
            conn.execute(
                insert(report_files),
                [{"job_id": job_id, "name": name, "size": len(data), "data": data}
                 for name, data in files.items()],
            )

    def read(self, job_id: str, name: str) -> bytes | None:
        """The content of a job's file, or None when it has none of that name."""
        query = select(report_files.c.data).where(
            report_files.c.job_id == job_id, report_files.c.name == name
        )
        with self.db.read() as conn:
            data = conn.execute(query).scalar()
        return None if data is None else bytes(data)

    def names(self, job_id: str) -> list[str]:
        """The names of a job's files, sorted (by code point, whatever the database's collation)."""
        query = select(report_files.c.name).where(report_files.c.job_id == job_id)
        with self.db.read() as conn:
            return sorted(str(name) for name in conn.execute(query).scalars())

    def delete(self, job_id: str) -> None:
        """Remove every file of a job (a submission that was not stored after all)."""
        with self.db.tx() as conn:
            conn.execute(delete(report_files).where(report_files.c.job_id == job_id))
