"""Every knob Leasehold has, read once from the environment (prefix ``LEASEHOLD_``).

This is the only module that reads the environment. Durations are seconds as
floats (``LEASE_TTL_S=0.5`` is valid: tests and demos use sub-second leases);
lists are comma-separated (``LEASEHOLD_QUEUES=default,mail``). An invalid value
is reported by :func:`load_settings` as one line naming the variable, and the
CLI exits with status 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.errors import ConfigurationError

ENV_PREFIX = "LEASEHOLD_"
QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_QUEUE_NAME = re.compile(QUEUE_NAME_PATTERN)

CommaList = Annotated[list[str], NoDecode]


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Validated configuration shared by the API, workers, reconciler and CLI."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    redis_url: str | None = Field(
        default=None,
        description="Redis to use; unset means the one `leasehold up` embedded, else localhost",
    )
    prefix: str = Field(default="lh", pattern=r"^[A-Za-z0-9_-]{1,32}$")
    queues: CommaList = Field(default_factory=lambda: ["default"], min_length=1)
    lease_ttl_s: float = Field(default=30.0, gt=0, le=3600)
    reconcile_interval_s: float | None = Field(default=None, gt=0)
    lease_safety_margin_s: float | None = Field(default=None, ge=0)
    concurrency: int = Field(default=16, ge=1, le=100_000)
    claim_batch_max: int = Field(default=64, ge=1, le=1000)
    handlers: CommaList = Field(default_factory=lambda: ["app.demo"])
    drain_timeout_s: float = Field(default=30.0, ge=0)
    run_retention_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    max_input_bytes: int = Field(default=1_048_576, ge=64)
    max_event_bytes: int = Field(default=65_536, ge=64)
    events_maxlen: int = Field(default=10_000, ge=10)
    default_max_attempts: int = Field(default=1, ge=1, le=1000)
    default_on_lease_expired: Literal["orphan", "retry"] = "orphan"
    retry_backoff_s: float = Field(default=1.0, ge=0)
    retry_backoff_max_s: float = Field(default=60.0, ge=0)
    reconciler_enabled: bool = True
    idle_wake_s: float = Field(default=5.0, gt=0)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=0, le=65535)
    api_keys: CommaList = Field(default_factory=list)
    api_url: str | None = None
    api_key: str | None = None
    state_dir: Path = Path(".leasehold")
    embedded_redis_port: int = Field(default=0, ge=0, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("queues", "handlers", "api_keys", mode="before")
    @classmethod
    def _parse_comma_list(cls, value: object) -> object:
        return _split_commas(value)

    @field_validator("queues")
    @classmethod
    def _check_queue_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _QUEUE_NAME.match(name):
                raise ValueError(f"queue name {name!r} must match {QUEUE_NAME_PATTERN}")
        return value

    @model_validator(mode="after")
    def _check_lease_timing(self) -> Settings:
        if (
            self.lease_safety_margin_s is not None
            and self.lease_safety_margin_s >= self.lease_ttl_s
        ):
            raise ValueError("lease_safety_margin_s must be shorter than lease_ttl_s")
        return self

    @property
    def renew_interval_s(self) -> float:
        """Heartbeat period: a third of the TTL, so two renewals may fail before expiry."""
        return self.lease_ttl_s / 3

    @property
    def effective_reconcile_interval_s(self) -> float:
        """How often each reconciler scans; defaults to TTL/3 like the heartbeat."""
        return self.reconcile_interval_s or self.lease_ttl_s / 3

    @property
    def effective_safety_margin_s(self) -> float:
        """Slack subtracted from the jeopardy deadline to absorb clock-rate drift and latency."""
        if self.lease_safety_margin_s is not None:
            return self.lease_safety_margin_s
        return self.lease_ttl_s / 6

    @property
    def lease_ttl_ms(self) -> int:
        """The TTL in the unit the Lua scripts use."""
        return max(1, round(self.lease_ttl_s * 1000))

    @property
    def run_retention_ms(self) -> int:
        """Retention in the unit the Lua scripts use."""
        return max(1, round(self.run_retention_s * 1000))

    @property
    def embedded_redis_url_file(self) -> Path:
        """Where `leasehold up` writes the URL of the Redis it started, for other commands."""
        return self.state_dir / "redis.url"

    @property
    def client_api_url(self) -> str:
        """Where the CLI reaches the API: LEASEHOLD_API_URL, else this host's API."""
        if self.api_url:
            return self.api_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host
        return f"http://{host}:{self.api_port}"

    def resolved_redis_url(self) -> str:
        """The Redis URL to connect to: configured, else the embedded one, else localhost.

        Other terminals' ``leasehold worker`` find the Redis started by ``leasehold up``
        through the URL file it writes under ``state_dir``.
        """
        if self.redis_url:
            return self.redis_url
        url_file = self.embedded_redis_url_file
        if url_file.is_file():
            return url_file.read_text().strip()
        return "redis://127.0.0.1:6379/0"


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, with CLI flags as overrides.

    Raises :class:`ConfigurationError` with one readable line per invalid value.
    """
    clean = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**clean)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "settings"
        name = f"{ENV_PREFIX}{field.upper()}" if error["loc"] else field
        problems.append(f"{name}: {error['msg']}")
    return "invalid setting " + "; ".join(problems)
