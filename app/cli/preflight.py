"""Before a command serves: settings, handlers and tracing, each refused as one line, exit 2.

Shared by the CLI's commands (:mod:`app.cli`, :mod:`app.cli.api_calls`): a refusal is a line
on stderr (``leasehold: ...``) and ``SystemExit(2)``, which typer passes through
unchanged.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

from app.errors import ConfigurationError

if TYPE_CHECKING:
    from app.handlers import HandlerRegistry
    from app.settings import Settings

EXIT_CONFIG = 2


def refuse(message: str) -> NoReturn:
    """Print ``leasehold: <message>`` on stderr and exit with the setting-error status (2)."""
    sys.stderr.write(f"leasehold: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_CONFIG)


def settings_or_exit(**overrides: Any) -> Settings:
    """Load settings with CLI overrides; on an invalid value print it and exit 2."""
    from app.settings import load_settings

    try:
        return load_settings(**overrides)
    except ConfigurationError as exc:
        refuse(str(exc))


def handlers_or_exit(settings: Settings) -> HandlerRegistry:
    """Import LEASEHOLD_HANDLERS from the app dir (first on ``sys.path``).

    A module that cannot be found is a setting error (exit 2), in one line saying
    where Python looked and how to make it findable (:mod:`app.cli.app_dir`).
    """
    from app.cli.app_dir import import_failure, put_first_on_path
    from app.handlers import load_handler_modules

    try:
        app_dir = put_first_on_path(settings.app_dir)
    except ConfigurationError as exc:
        refuse(str(exc))
    for module in settings.handlers:
        try:
            load_handler_modules([module])
        except ImportError as exc:
            refuse(import_failure(module, exc, app_dir))
    return load_handler_modules([])


def runnable_handlers_or_exit(settings: Settings) -> HandlerRegistry:
    """``handlers_or_exit``, and a worker with nothing to run is a setting error too (exit 2).

    No handler is registered by default (the demo's are on only for ``leasehold up``), so
    a worker started without LEASEHOLD_HANDLERS would claim nothing, silently, forever.
    """
    from app.settings import DEMO_HANDLERS

    registry = handlers_or_exit(settings)
    if len(registry) == 0:
        refuse(
            "no handlers: set LEASEHOLD_HANDLERS to the modules that define them "
            f"(got {','.join(settings.handlers) or 'nothing'}; `leasehold up` adds the demo's, "
            f"{DEMO_HANDLERS})"
        )
    return registry


def tracing_or_exit(settings: Settings, service_name: str) -> None:
    """Turn tracing on as LEASEHOLD_TRACING says; asked for without the [otel] extra: exit 2."""
    from app.telemetry.tracing import configure as configure_tracing

    try:
        configure_tracing(settings, service_name)
    except ConfigurationError as exc:
        refuse(f"invalid setting LEASEHOLD_TRACING: {exc}")
