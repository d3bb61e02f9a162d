"""Bring a job store's database to the schema of this code, when it opens (Alembic, in code).

Every process migrates the database it opens, so several replicas starting at once may try
together; one migrates and the others find the work done:

* Postgres: the migration runs in one transaction holding an advisory lock; DDL is
  transactional there, so a replica that waited for the lock sees the schema committed.
* SQLite: the migration runs in one ``BEGIN IMMEDIATE`` transaction, which holds the file's
  write lock from its start (as the store's own writes do).

A database at ``SCHEMA_REVISION`` already is recognised with one query, before Alembic is even
imported, so opening a migrated store costs no more than it did before. A SQLite file written
before Alembic (no ``alembic_version`` table, but a ``jobs`` table) is given what version 3 had
and stamped ``0001`` (which is version 3), then upgraded like any other.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from api.jobs.database import Database
from api.jobs.schema import SCHEMA_REVISION
from api.jobs.sqlite import bring_to_version_3
from core.errors import ConfigError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger("bonusjudge.jobs")

MIGRATIONS = Path(__file__).with_name("migrations")
"""Alembic's script folder: ``env.py`` and ``versions/``."""

_LOCK = "job-store-migrations"
_VERSION_TABLE = "alembic_version"


def upgrade(db: Database) -> None:
    """Migrate ``db`` to ``SCHEMA_REVISION`` (a no-op when it is there already).

    Raises:
        ConfigError: the database was migrated by a newer bonusjudge (a revision this code does
            not know); ``jobs_url`` or ``data_dir`` is named.
        sqlalchemy.exc.DBAPIError: the database cannot be reached or written.
    """
    with db.read() as conn:
        if _revision(conn) == SCHEMA_REVISION:
            return
    with db.tx() as conn:
        # Replicas starting together wait for the first one's migration, however long it takes.
        db.unbounded(conn)
        db.lock(conn, _LOCK)
        current = _revision(conn)  # again, under the lock: another process may have migrated
        if current == SCHEMA_REVISION:
            return
        from alembic import command  # here: a migrated store never pays for importing Alembic
        from alembic.script import ScriptDirectory

        config = _config(conn)
        known = {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}
        if current is not None and current not in known:
            raise ConfigError(
                f"the job store {db.describe()} has schema revision {current!r}, written by a "
                f"newer bonusjudge (this one knows up to {SCHEMA_REVISION!r}); upgrade "
                "bonusjudge to use it",
                field="data_dir" if db.path is not None else "jobs_url",
            )
        if current is None and not db.postgres and inspect(conn).has_table("jobs"):
            log.info("job store %s: written before version 4; migrating it", db.describe())
            bring_to_version_3(conn)
            command.stamp(config, "0001")
        command.upgrade(config, SCHEMA_REVISION)
        log.info("job store %s: schema at revision %s", db.describe(), SCHEMA_REVISION)


def _revision(conn: Connection) -> str | None:
    """The database's Alembic revision, or None when it has none (new, or from before 4)."""
    if not inspect(conn).has_table(_VERSION_TABLE):
        return None
    row = conn.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).first()
    return None if row is None else str(row[0])


def _config(conn: Connection) -> Config:
    """Alembic's configuration, built in code (no ``alembic.ini``), migrating ``conn``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config
