"""What every group of settings shares: where values come from, how lists are written, bounds.

A group is a pydantic-settings ``BaseSettings`` holding the fields of one component
(:mod:`app.settings.leases`, :mod:`app.settings.worker`, ...); :class:`app.settings.Settings`
inherits them all, so each field keeps its one name, ``settings.<field>`` and
``LEASEHOLD_<FIELD>``. A group can also be read on its own (``LeaseSettings()``).

Values come from, first to last (the first that has one wins; a ``dict`` setting's keys
are merged): the arguments (``Settings(lease_ttl_s=2)``, the CLI's flags), the environment
(any case; JSON for a ``dict`` setting, ``__`` for one of its keys:
``LEASEHOLD_OP_LEASE_S__MODEL_CALL=30``), then the ``.env`` file ``LEASEHOLD_ENV_FILE``
names, in the working directory by default (python-dotenv's syntax).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "LEASEHOLD_"
DEFAULT_ENV_FILE = ".env"
# the longest any run is kept or may wait (10 years): bounds what becomes a PEXPIRE/ZADD
# in Lua, whose numbers are exact only to 2^53 and whose retention spec takes 15 digits
MAX_KEEP_S = 10 * 365 * 24 * 3600.0
# Waits that bound a stream or a connection: an endless one ("inf") is the hang they exist
# to prevent, so they are finite and at most an hour (a pool wait at most a minute: a
# request that waits longer for a connection should have been told 503 long ago).
WAIT_MAX_S = 3600.0
POOL_WAIT_MAX_S = 60.0
# worker timings (drain, intervals, leases, backoff): finite, at most an hour or a day
HOUR_S = 3600.0
DAY_S = 24 * HOUR_S


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# a list written as `a, b` (not JSON), trimmed, empty parts dropped
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split_commas)]


class SettingsGroup(BaseSettings):
    """The fields of one component, read as the module docstring says."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        env_nested_delimiter="__",
        extra="ignore",
        frozen=True,
        validate_default=True,
        # a group's own schema is built only if it is read on its own: a process builds
        # the composed Settings' alone
        defer_build=True,
    )

    env_file: str = Field(
        default=DEFAULT_ENV_FILE,
        description="The .env file read under the environment (relative to the working "
        "directory; empty: none). Read from the environment only, never from a .env file",
    )

    @field_validator("env_file")
    @classmethod
    def _check_env_file(cls, value: str) -> str:
        # a missing .env is the common case; a file named on purpose and absent is a mistake
        # (a pipe is a file here, as pydantic-settings reads one: LEASEHOLD_ENV_FILE=<(...))
        path = Path(value).expanduser()
        if value not in ("", DEFAULT_ENV_FILE) and not (path.is_file() or path.is_fifo()):
            raise ValueError("no such file")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, environment, then the .env file the two name (no secrets directory).

        The file's own ``LEASEHOLD_ENV_FILE`` line is never taken: ``env_file`` is pinned
        to the file actually read, before the file's values.
        """
        env_file = _env_file_named(init_settings, env_settings)
        return (
            init_settings,
            env_settings,
            InitSettingsSource(settings_cls, init_kwargs={"env_file": env_file}),
            DotEnvSettingsSource(settings_cls, env_file=env_file or None),
        )


def _env_file_named(init: PydanticBaseSettingsSource, env: PydanticBaseSettingsSource) -> str:
    """``env_file`` as given to the class, else ``LEASEHOLD_ENV_FILE``, else ``.env``."""
    if isinstance(init, InitSettingsSource) and "env_file" in init.init_kwargs:
        return str(init.init_kwargs["env_file"])
    if isinstance(env, EnvSettingsSource):
        return env.env_vars.get(f"{ENV_PREFIX}env_file".lower(), DEFAULT_ENV_FILE) or ""
    return DEFAULT_ENV_FILE
