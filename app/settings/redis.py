"""Redis: where it is, how keys are named, how writes are acknowledged, how the API pools it.

Also the Redis ``leasehold up`` embeds (its state directory and port). There is no
implicit Redis: a process started without ``LEASEHOLD_REDIS_URL`` uses the stack
``leasehold up`` runs from its directory (the address book in ``state_dir``, read by
:mod:`app.cli.address`), or refuses to start.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from app.errors import ConfigurationError
from app.namespaces import DEFAULT_NAMESPACE, NAMESPACE_PATTERN, namespace_prefix
from app.redis_url import parse_redis_url
from app.settings.group import POOL_WAIT_MAX_S, SettingsGroup


class RedisSettings(SettingsGroup):
    """Redis: where it is, how keys are named, how writes are acknowledged."""

    redis_url: str | None = Field(
        default=None,
        description="Redis to use; unset means the one of the `leasehold up` running from "
        "this directory (its address book, STATE_DIR/stack.json), else none: a process "
        "refuses to start. "
        "redis:// or rediss:// for one node, redis+cluster://host:port,host:port for Redis "
        "Cluster, redis+sentinel://host:port,host:port/service_name for Sentinel",
    )
    prefix: str = Field(
        default="lh",
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="First part of every Redis key, so several deployments can share one Redis",
    )
    namespace: str = Field(
        default=DEFAULT_NAMESPACE,
        pattern=NAMESPACE_PATTERN,
        description="The namespace (tenant) a worker serves and the CLI addresses; an API "
        "serves every namespace (a request names its own with the Leasehold-Namespace "
        "header, or its key's)",
    )
    replica_acks: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Replicas that must acknowledge (Redis WAIT) each create, claim, terminal "
        "write, checkpoint and effect record before a worker or client acts on it; 0 means "
        "asynchronous replication only",
    )
    replica_ack_timeout_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Longest wait for REPLICA_ACKS; past it the write stands and is logged "
        "as under-replicated",
    )
    redis_max_connections: int = Field(
        default=64,
        ge=1,
        description="Redis connections the API's request pool opens at most (per node in a "
        "cluster, where the floor is 512)",
    )
    redis_pool_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=POOL_WAIT_MAX_S,
        allow_inf_nan=False,
        description="Longest an API request waits for a free Redis connection; past it 503 "
        "with Retry-After",
    )
    redis_request_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=POOL_WAIT_MAX_S,
        allow_inf_nan=False,
        description="Longest an API request waits for Redis to answer one command; past it "
        "503 store-unavailable with Retry-After (a create answered so may have been written: "
        "retry it with the same Idempotency-Key)",
    )
    state_dir: Path = Field(
        default=Path(".leasehold"),
        description="Where `leasehold up` keeps the embedded Redis (AOF, log, redis.port) and "
        "its address book (stack.json, mode 0600: the API's URL, Redis's with its password, "
        "the settings it started its children with)",
    )
    embedded_redis_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the embedded Redis; 0: the port STATE_DIR used last if free, "
        "else a free one",
    )

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value:
            parse_redis_url(value)  # InvalidRedisUrl is a ValueError: one clear line, exit 2
        return value

    @property
    def data_prefix(self) -> str:
        """The prefix of this namespace's keys (queues, runs, schedules, workers...);
        ``prefix`` alone names what every namespace shares (API keys, audit, signing)."""
        return namespace_prefix(self.prefix, self.namespace)

    @property
    def replica_ack_timeout_ms(self) -> int:
        """The WAIT timeout in the unit Redis takes."""
        return max(1, round(self.replica_ack_timeout_s * 1000))

    @property
    def stack_file(self) -> Path:
        """Where `leasehold up` writes its address book, for the commands started beside it."""
        return self.state_dir / "stack.json"

    def resolved_redis_url(self) -> str:
        """The Redis URL to connect to; raises :class:`ConfigurationError` when none is set.

        Never a default: a process that quietly used ``127.0.0.1:6379`` would serve
        whoever owns it. The CLI fills ``redis_url`` from ``leasehold up``'s address book
        before anything connects (:mod:`app.cli.address`).
        """
        if not self.redis_url:
            raise ConfigurationError(
                "no Redis to use: set LEASEHOLD_REDIS_URL, or start `leasehold up` and run "
                "this from its directory"
            )
        return self.redis_url
