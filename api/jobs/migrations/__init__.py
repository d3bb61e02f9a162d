"""Alembic migrations of the job store (run by ``api.jobs.migrate.upgrade`` when it opens).

``env.py`` runs them on the connection ``upgrade`` hands over, inside its transaction; the
revisions are in ``versions/``, one file each, never rewritten once released. To change the
schema, add a revision whose ``down_revision`` is the newest one, update ``api.jobs.schema`` (and
its ``SCHEMA_REVISION``) to match, and run ``tests/api/jobs/test_migrations.py``, which checks
that the migrated schema is the one ``api.jobs.schema`` describes, on SQLite and Postgres.
"""
