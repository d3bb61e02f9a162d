"""The job store's revisions, oldest first: ``0001`` is version 3 of the pre-Alembic schema."""
