"""The HTTP API: where it listens, its connections, who may call it, where the CLI finds it."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from app.settings.group import WAIT_MAX_S, CommaList, SettingsGroup

# what an HTTP client can send in an Authorization header without escaping
API_KEY_PATTERN = r"^[A-Za-z0-9._~+/=-]{16,256}$"
_API_KEY = re.compile(API_KEY_PATTERN)
# host names that only a client on this machine can send (a rebinding page never does)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# addresses that mean "every interface": a client on this host reaches them on loopback
_ANY_ADDRESS = ("0.0.0.0", "::", "")


class ApiSettings(SettingsGroup):
    """The HTTP API, its callers, and the CLI as its client."""

    api_host: str = Field(default="127.0.0.1", description="Address the API binds to")
    api_port: int = Field(default=8000, ge=0, le=65535, description="Port the API listens on")
    api_max_connections: int = Field(
        default=2000,
        ge=1,
        description="Open HTTP connections one API process accepts (uvicorn limit_concurrency); "
        "past it 503 with Retry-After",
    )
    api_access_log: bool = Field(
        default=True,
        description="One log line per HTTP request (uvicorn's access log); `leasehold up` "
        "starts its API without it unless `--access-log`",
    )
    api_keep_alive_s: float = Field(
        default=5.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="An idle keep-alive connection is closed after this long",
    )
    api_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=WAIT_MAX_S,
        allow_inf_nan=False,
        description="A request's line and headers must arrive within this long, or the "
        "connection is closed",
    )
    api_keys: CommaList = Field(
        default_factory=list,
        description="Bearer keys the API accepts (comma-separated, several to rotate); when "
        "set, every route but /healthz needs `Authorization: Bearer <key>`",
    )
    trusted_hosts: CommaList = Field(
        default_factory=list,
        description="Host names the API answers to besides localhost, 127.0.0.1 and ::1 "
        "(comma-separated; `*.example.com` for subdomains, `*` for any); any other Host "
        "header gets 400, against DNS rebinding. Required when API_HOST is not loopback",
    )
    cors_origins: CommaList = Field(
        default_factory=list,
        description="Browser origins allowed by CORS (comma-separated, `*` for any); "
        "empty means CORS is off",
    )
    api_url: str | None = Field(
        default=None,
        description="Where the CLI reaches the API; unset means this host's API_HOST:API_PORT",
    )
    api_key: str | None = Field(default=None, description="Bearer key the CLI sends to the API")

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not _API_KEY.fullmatch(key):
                # the value is a secret: name the rule, never echo the key
                raise ValueError(f"every key must match {API_KEY_PATTERN}")
        return value

    @property
    def client_api_url(self) -> str:
        """Where the CLI reaches the API: LEASEHOLD_API_URL (without a trailing /), else here."""
        if self.api_url:
            return self.api_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in _ANY_ADDRESS else self.api_host
        return f"http://{host}:{self.api_port}"
