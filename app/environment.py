"""The process environment as the settings read it, and the CLI client's part of it.

:mod:`app.settings` validates every ``LEASEHOLD_*`` variable with a pydantic model of
100-odd fields; building it, with pydantic and the models, is ~0.1 s of a ``leasehold
runs get``'s start-up on this machine (issue 19: <= 300 ms), and that command needs
two of them. So the environment is read here, once, by both: :func:`variables` is
what :class:`app.settings.Settings` reads, and :func:`client_settings` gives ``runs
get`` the API's address and key without the model *only when the model could not
have refused anything*: no ``LEASEHOLD_*`` variable but ``LEASEHOLD_API_URL`` and
``LEASEHOLD_API_KEY`` (neither has a rule) is set. Otherwise the caller validates
all of them, as before, and a bad value is still one line and status 2.
"""

from __future__ import annotations

import os

PREFIX = "leasehold_"
DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8000
# the variables a client reads; nothing validates them beyond being text
_CLIENT_VARIABLES = ("leasehold_api_url", "leasehold_api_key")


def variables() -> dict[str, str]:
    """The environment with lower-cased names (the settings' names match in any case).

    Of two names that differ only in case, the later in ``os.environ`` wins.
    """
    return {name.lower(): value for name, value in os.environ.items()}


def client_settings() -> tuple[str, str | None] | None:
    """``(Settings.client_api_url, Settings.api_key)`` without the model, or ``None``.

    ``None`` when another ``LEASEHOLD_*`` variable is set: only the model can say
    whether it is valid, and an invalid one must still stop the command.
    """
    environ = variables()
    if any(name.startswith(PREFIX) and name not in _CLIENT_VARIABLES for name in environ):
        return None
    return client_api_url(environ.get("leasehold_api_url"), DEFAULT_API_HOST, DEFAULT_API_PORT), (
        environ.get("leasehold_api_key")
    )


def client_api_url(api_url: str | None, api_host: str, api_port: int) -> str:
    """Where the CLI reaches the API: ``api_url`` (no trailing ``/``), else this host's."""
    if api_url:
        return api_url.rstrip("/")
    host = "127.0.0.1" if api_host in ("0.0.0.0", "::", "") else api_host
    return f"http://{host}:{api_port}"
