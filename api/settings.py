"""The service's settings: what ``bonusjudge serve`` needs beyond the engine's.

``ServiceSettings`` extends the engine's ``judge.config.Settings`` (the default judge, the
cache) with the service's policy: API keys, allowed models, request and quota limits, the job
store and its timeouts, retention, CORS. A new quota is an edit here, not in the engine room,
and the commands that only grade never read (or need) an API key setting. The names, the
``BONUSJUDGE_*`` variables, the defaults and the messages are the ones the settings always had.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from judge.config import Settings, load_settings


class ServiceSettings(Settings):
    """The service's settings: the engine's, and the policy only the service applies.

    Read from the same ``BONUSJUDGE_*`` variables and settings file as the engine's; every name
    the file holds must be one of these (an unknown one stops start-up, naming it).
    """

    data_dir: Path | None = Field(
        default=None, description="Service data (jobs, reports); default: <cache_dir>/service."
    )
    jobs_url: str | None = Field(
        default=None,
        description="Shared job store, `postgresql://user@host:port/db`; default: a SQLite file "
        "in the service data folder on this machine.",
    )
    allowed_models: list[str] = Field(
        default_factory=list,
        description="Models a request may select; the default judge is always allowed.",
    )
    api_keys: list[str] = Field(
        default_factory=list,
        description="Accepted API keys, as `sha256:<hex digest>` (`bonusjudge hash-key KEY`) or "
        "plain keys, which are hashed on load and never kept.",
    )
    operator_keys: list[str] = Field(
        default_factory=list,
        description="Keys that may read `/metrics` (service-wide counters: every API key's jobs, "
        "tokens, cost and cache hits), given as `api_keys` are; an API key there gets 403. With "
        "neither `api_keys` nor `operator_keys` configured, `/metrics` needs no key.",
    )
    max_batch: int = Field(default=256, ge=1, le=10_000, description="Items per batch request.")
    max_job_items: int = Field(default=100_000, ge=1, description="Items per job.")
    max_body_bytes: int = Field(default=20_000_000, ge=1_000, description="Request body limit.")
    max_bonus_points: int = Field(default=32, ge=1, le=32, description="Points per item.")
    cors_origins: list[str] = Field(default_factory=list, description="CORS origins (off).")
    cache_scope: Literal["shared", "per_key"] | None = Field(
        default=None,
        description="How API keys share the judge-call cache: `per_key` (each key's calls are "
        "cached apart and paid again per key: no key can tell what another graded) or `shared` "
        "(a key is served the entries another key paid for, and can tell that it was: the "
        "answer is faster and has no token counts or cost, and its usage counts cache hits). "
        "Default: `per_key` with API keys configured, `shared` without (one caller).",
    )

    max_jobs_per_key: int = Field(
        default=16, ge=1,
        description="Queued or running jobs one API key may have at once (any kind).",
    )
    max_queued_items_per_key: int = Field(
        default=200_000, ge=1,
        description="Items not yet finished across one API key's queued and running jobs.",
    )
    max_stored_bytes_per_key: int = Field(
        default=2_000_000_000, ge=1,
        description="Bytes of items and results one API key's jobs may keep in the job store "
        "(as stored, compressed); freed when its jobs expire (`retention_days`).",
    )
    max_retry_passes: int = Field(
        default=3, ge=0,
        description="`POST /v1/jobs/{id}/retry-unscored` passes one job may have (each re-sends "
        "its unscored items); beyond them the route answers 409 naming this limit.",
    )
    max_cost_per_key_usd: float | None = Field(
        # `inf` would be no budget at all, `nan` one no spend reaches: refused, naming it.
        default=None, ge=0, allow_inf_nan=False,
        description="USD one API key's judge calls may cost per UTC day (priced as litellm's "
        "model cost map prices the judge model); over it, submissions are answered 429 "
        "`budget_exhausted` and the key's running jobs pause until the next UTC midnight. "
        "None: no budget.",
    )
    max_sync_items_per_key: int = Field(
        default=1_024, ge=1,
        description="Items one API key may have in flight or waiting on the synchronous grading "
        "routes (`/v1/grade`, `/v1/grade/batch`); a request beyond it is answered 429 with "
        "`Retry-After` (jobs have the quotas above instead). At least `max_batch`.",
    )
    max_sync_bytes_per_key: int = Field(
        default=40_000_000, ge=1,
        description="Bytes of request bodies one API key may have in flight on the synchronous "
        "routes (grade, batch, bonus points, metrics, multiple choice) and its job uploads "
        "(while they are read and stored); a request beyond it is answered 429 with "
        "`Retry-After` before its body is read. At least `max_body_bytes`.",
    )
    max_sync_bytes: int = Field(
        default=80_000_000, ge=1,
        description="Bytes of request bodies in flight on the synchronous routes and the job "
        "uploads, all keys together; a request beyond it is answered 503 with `Retry-After` "
        "before its body is read. At least `max_sync_bytes_per_key`.",
    )
    job_lease_seconds: float = Field(
        default=30.0, gt=0, le=3600,
        description="Length of a job lease: a job whose process stopped renewing it (killed, "
        "lost its host) is taken up by another replica this long after the last renewal.",
    )
    jobs_lock_timeout_seconds: float = Field(
        default=5.0, gt=0, le=3600,
        description="Postgres job store: how long a statement waits for a row lock held by "
        "another connection (`lock_timeout`) before it fails and is retried, so a replica that "
        "stopped mid-transaction (a pause, a partition) holds no other replica up for long.",
    )
    jobs_statement_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600,
        description="Postgres job store: how long one statement may run (`statement_timeout`); "
        "a server that does not answer for this long (and 2 s more) has its connection cut, "
        "and the request that needed it is answered 503 `store_unavailable`.",
    )
    jobs_idle_in_transaction_seconds: float = Field(
        default=60.0, gt=0, le=86_400,
        description="Postgres job store: the server ends the session of a replica that sent "
        "nothing for this long inside a transaction "
        "(`idle_in_transaction_session_timeout`), releasing its locks.",
    )
    retention_days: float = Field(
        default=30.0, ge=0,
        description="Days a finished job (its items and results, and a calibration run's "
        "report) is kept after it last changed; 0 keeps them forever.",
    )

    @field_validator("jobs_url")
    @classmethod
    def _check_jobs_url(cls, value: str | None) -> str | None:
        if value and value.split("://", 1)[0].split("+", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("expected a postgresql:// URL")
        return value or None

    @field_validator("api_keys", "operator_keys")
    @classmethod
    def _hash_keys(cls, value: list[str]) -> list[str]:
        # Keys are kept only as sha256 digests, so a dump of the settings reveals none. A digest
        # must say so ("sha256:..."): a plain key that happens to be 64 hex characters (e.g.
        # `openssl rand -hex 32`) is a key, not a digest.
        out = []
        for key in value:
            if key.startswith("sha256:"):
                digest = key.removeprefix("sha256:").lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError("a `sha256:` API key digest needs 64 hex digits")
                out.append(digest)
            else:
                out.append(hashlib.sha256(key.encode()).hexdigest())
        return out

    @field_serializer("api_keys", "operator_keys")
    def _dump_digests(self, value: list[str]) -> list[str]:
        # Dumped digests say what they are, so loading a dump does not hash them again.
        return [f"sha256:{digest}" for digest in value]

    @model_validator(mode="after")
    def _check_sync_limits(self) -> ServiceSettings:
        # A limit below the largest request it governs would refuse that request for ever.
        pairs = (
            ("max_sync_items_per_key", self.max_sync_items_per_key, "max_batch", self.max_batch),
            ("max_sync_bytes_per_key", self.max_sync_bytes_per_key,
             "max_body_bytes", self.max_body_bytes),
            ("max_sync_bytes", self.max_sync_bytes,
             "max_sync_bytes_per_key", self.max_sync_bytes_per_key),
        )
        for name, value, floor_name, floor in pairs:
            if value < floor:
                raise ValueError(
                    f"{name} ({value}) must be at least {floor_name} ({floor}): a request of "
                    f"that size would never be admitted"
                )
        return self

    def resolved_data_dir(self) -> Path:
        """The service data folder (jobs database, stored reports)."""
        return self.data_dir or (self.cache_dir / "service")

    def resolved_cache_scope(self) -> Literal["shared", "per_key"]:
        """The cache scope in force: the setting, else ``per_key`` when API keys are configured.

        Sharing lets a key learn which items another key graded (a cross-key cache oracle), so
        a service with keys shares only when its operator says so; a service without keys has
        one caller, who gains nothing from being kept apart from itself.
        """
        if self.cache_scope is not None:
            return self.cache_scope
        return "per_key" if self.api_keys else "shared"


SERVICE_ONLY: frozenset[str] = frozenset(ServiceSettings.model_fields) - frozenset(
    Settings.model_fields
)
"""The names only the service reads: skipped by the engine's commands in a shared settings
file (``load_settings(also_known=...)``), and never read by them."""


def load_service_settings(
    settings_file: str | Path | None = None, **overrides: Any
) -> ServiceSettings:
    """Build and validate the service's settings (environment, settings file, ``overrides``).

    Every name of the settings file must be a service setting.

    Raises:
        ConfigError: naming the first invalid setting.
    """
    return load_settings(settings_file, model=ServiceSettings, also_known=(), **overrides)


__all__ = ["SERVICE_ONLY", "ServiceSettings", "load_service_settings"]
