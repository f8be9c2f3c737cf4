"""Every knob Leasehold has: the settings groups, composed into one :class:`Settings`.

This package is the only code that reads the environment. Each module holds one
component's group (:mod:`app.settings.redis`, :mod:`app.settings.leases`, ...), a
pydantic-settings ``BaseSettings`` read as :mod:`app.settings.group` says: the
``LEASEHOLD_*`` environment over the ``.env`` file of the working directory
(``LEASEHOLD_ENV_FILE`` picks another; empty reads none). :class:`Settings` inherits
every group, so each field keeps one name: ``settings.lease_ttl_s`` is
``LEASEHOLD_LEASE_TTL_S``. Durations are seconds as floats (``LEASE_TTL_S=0.5`` is
valid: tests and demos use sub-second leases); lists are comma-separated
(``LEASEHOLD_QUEUES=default,mail``). An invalid value is reported by
:func:`load_settings` as one line naming the variable, and the CLI exits with status 2.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Self

from pydantic import ValidationError, model_validator
from pydantic_settings import SettingsError

from app.errors import ConfigurationError
from app.settings.api import API_KEY_PATTERN, LOOPBACK_HOSTS, ApiSettings
from app.settings.attempts import AttemptSettings
from app.settings.bulk import BulkSettings
from app.settings.family import FamilySettings
from app.settings.flow import FlowSettings
from app.settings.group import ENV_PREFIX, MAX_KEEP_S
from app.settings.keys import KeySettings
from app.settings.leases import LeaseSettings
from app.settings.listing import ListingSettings
from app.settings.memory import MemorySettings
from app.settings.queues import QueueSettings
from app.settings.redis import RedisSettings
from app.settings.retention import RetentionSettings
from app.settings.schedules import ScheduleSettings
from app.settings.streams import StreamSettings
from app.settings.telemetry import TelemetrySettings
from app.settings.tokens import TokenSettings
from app.settings.waits import WaitSettings
from app.settings.watchdog import WatchdogSettings
from app.settings.worker import DEMO_HANDLERS, WorkerSettings

__all__ = [
    "API_KEY_PATTERN",
    "DEMO_HANDLERS",
    "ENV_PREFIX",
    "LOOPBACK_HOSTS",
    "MAX_KEEP_S",
    "Settings",
    "is_loopback",
    "load_settings",
]

# settings whose values may be credentials: an error names them but never echoes them
_SECRET_FIELD = re.compile(r"key|url|password|secret|token", re.IGNORECASE)
# how pydantic-settings names the setting whose value it could not parse as JSON
_SOURCE_FIELD = re.compile(r'field "(?P<field>\w+)"')


class Settings(
    RedisSettings,
    MemorySettings,
    QueueSettings,
    FlowSettings,
    LeaseSettings,
    WorkerSettings,
    AttemptSettings,
    RetentionSettings,
    ScheduleSettings,
    BulkSettings,
    WaitSettings,
    FamilySettings,
    WatchdogSettings,
    StreamSettings,
    ListingSettings,
    ApiSettings,
    KeySettings,
    TelemetrySettings,
    TokenSettings,
):
    """Validated configuration shared by the API, workers, reconciler and CLI.

    ``Settings(**values)`` reads the ``LEASEHOLD_*`` environment and ``.env`` file; a
    value given here wins over both (a ``dict`` setting's keys are merged).
    """

    @model_validator(mode="after")
    def _check_worker_metrics_exposure(self) -> Self:
        # an open metrics port beyond loopback tells anyone the queues, handlers and load
        if (
            self.worker_metrics_port
            and not self.api_keys
            and not is_loopback(self.worker_metrics_host)
        ):
            raise ValueError(
                f"{ENV_PREFIX}WORKER_METRICS_HOST={self.worker_metrics_host} serves metrics "
                f"beyond loopback: set {ENV_PREFIX}API_KEYS so scrapes need a bearer key"
            )
        return self


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment and ``.env``, with CLI flags as overrides.

    Raises :class:`ConfigurationError` with one readable line per invalid value.
    """
    # Any: each value is validated by its field (a flag given as the wrong type is refused)
    clean: dict[str, Any] = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        raise ConfigurationError(_describe(exc)) from None
    except SettingsError as exc:
        raise ConfigurationError(_describe_unparsed(exc)) from None


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach a listener on ``host``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _describe(exc: ValidationError) -> str:
    """One line; each problem names its variable and, unless it may be a secret, the value."""
    problems = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if error["loc"]:
            field = "_".join(str(part) for part in error["loc"])
            shown = "" if _SECRET_FIELD.search(field) else f" (got {error['input']!r})"
            message = f"{ENV_PREFIX}{field.upper()}: {message}{shown}"
        problems.append(message)
    return "invalid setting " + "; ".join(problems)


def _describe_unparsed(exc: SettingsError) -> str:
    """One line for a ``dict`` setting whose value is not JSON (pydantic-settings' refusal)."""
    match = _SOURCE_FIELD.search(str(exc))
    if match is None:
        return f"invalid setting: {exc}"
    return f"invalid setting {ENV_PREFIX}{match['field'].upper()}: not JSON ({exc.__cause__})"
