"""Alembic's environment for the job store: migrate the connection ``api.jobs.migrate`` gives.

``upgrade`` opens the transaction (holding the migration lock) and passes its connection in
``config.attributes["connection"]``; the migrations run inside it and commit with it, so a
failure leaves the database as it was. There is no offline (SQL script) mode and no ``alembic``
command-line use: every process migrates its database when it opens it.
"""

from __future__ import annotations

from alembic import context

from api.jobs.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the job store's migrations run when bonusjudge opens its database "
        "(api.jobs.migrate.upgrade), not from the alembic command"
    )
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
