"""Persisted jobs: the store, the leases, the worker that runs them, and reading submissions.

A job survives a restart: its items and every result live in a database, each result written
as it is ready, so a restarted service resumes where the last one stopped. The database is one
SQLite file under the service's data folder, or a Postgres database that several replicas share
(the ``jobs_url`` setting). Several processes may share it; a job's items are leased in chunks, so
every process with room works on every running job, each chunk run by the one holding its lease.
The package, by responsibility:

``store``      ``JobStore``, every operation on persisted jobs (the one store boundary), and
               ``open_store``; over ``database`` (the engine, transactions, the lease clock),
               ``schema`` (the tables, SQLAlchemy Core), ``migrate`` and ``migrations/``
               (Alembic, run on open), ``sqlite`` and ``postgres`` (each engine's set-up),
               ``claims`` (leases on chunks of a job's items, in SQL), ``items`` (item rows
               and results), ``files`` (files kept with a job) and ``codec`` (compressed
               JSON).
``policy``     how keys share the service: ``Quota`` and the fairness rules.
``worker``     ``Worker``: claims, renews, runs and releases this process's chunks; retention
               (its ``WorkerSettings``).
``manager``    ``JobManager``: submit, watch, stream, summarise, cancel (what services call).
``grading``    the runner of grading jobs.
``uploads``    reading a submission (JSON, JSONL, multipart) and validating grading items;
               over ``spool`` (the upload on disk, read one item at a time) and ``staging``
               (items validated and encoded in batches, off the event loop).
``status``     a job's public status and a grading job's aggregates.
"""

from api.jobs.claims import Chunk
from api.jobs.codec import pack, unpack
from api.jobs.database import STORE_ERRORS
from api.jobs.items import JobItem
from api.jobs.manager import JobManager, JobRunner
from api.jobs.policy import FINAL_REASONS, Quota, RetryPolicy, Usage, check_request
from api.jobs.schema import GRADE, SCHEMA_REVISION, JobRow
from api.jobs.spool import RawItem
from api.jobs.staging import ItemLimit, StagedItems, in_upload_thread, stage_items
from api.jobs.status import grading_summary, job_status
from api.jobs.store import JOBS_DB, JobStore, open_store
from api.jobs.uploads import (
    JSONL_MEDIA_TYPE,
    JSONL_TYPES,
    GradeItems,
    JobUpload,
    Upload,
    UploadDoc,
    build_items,
    grade_limit,
    jsonl_items,
    jsonl_schema,
    media_type,
    receive_job_upload,
    receive_upload,
    with_line,
)
from api.jobs.worker import Worker, WorkerSettings, current_chunk

__all__ = [
    "FINAL_REASONS",
    "GRADE",
    "JOBS_DB",
    "JSONL_MEDIA_TYPE",
    "JSONL_TYPES",
    "SCHEMA_REVISION",
    "STORE_ERRORS",
    "Chunk",
    "GradeItems",
    "ItemLimit",
    "JobItem",
    "JobManager",
    "JobRow",
    "JobRunner",
    "JobStore",
    "JobUpload",
    "Quota",
    "RawItem",
    "RetryPolicy",
    "StagedItems",
    "Upload",
    "UploadDoc",
    "Usage",
    "Worker",
    "WorkerSettings",
    "build_items",
    "check_request",
    "current_chunk",
    "grade_limit",
    "grading_summary",
    "in_upload_thread",
    "job_status",
    "jsonl_items",
    "jsonl_schema",
    "media_type",
    "open_store",
    "pack",
    "receive_job_upload",
    "receive_upload",
    "stage_items",
    "unpack",
    "with_line",
]
