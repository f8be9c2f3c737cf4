"""What a ``LEASEHOLD_REDIS_URL`` asks for, read without connecting anywhere.

The settings validate the URL at start (a bad one is one clear line, exit 2) and
:mod:`app.store.redis.connection` builds clients from the parsed :class:`RedisTarget`;
parsing lives here, below both, so that the settings need not import the store.
The accepted forms and options are listed in :mod:`app.store.redis.connection`.
Messages never repeat the URL: it may hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

Mode = Literal["single", "cluster", "sentinel"]

_SCHEMES: dict[str, tuple[Mode, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "unix": ("single", False),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
}
_CERT_REQS = frozenset({"required", "optional", "none"})
_TLS_PATH_OPTIONS = frozenset({"ssl_ca_certs", "ssl_certfile", "ssl_keyfile"})
_SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})


class InvalidRedisUrl(ValueError):
    """A Redis URL this module cannot connect with; the message says what is wrong."""


@dataclass(frozen=True)
class RedisTarget:
    """What a Redis URL asks for: the mode, where to start, and how to authenticate."""

    mode: Mode
    url: str
    tls: bool = False
    nodes: tuple[tuple[str, int], ...] = ()
    username: str | None = None
    password: str | None = None
    service_name: str = ""  # sentinel mode only
    db: int = 0
    tls_options: dict[str, Any] = field(default_factory=dict)
    sentinel_auth: dict[str, str] = field(default_factory=dict)

    @property
    def seeds(self) -> list[str]:
        """The seed nodes (cluster) or sentinels as ``host:port``, for people."""
        return [f"{host}:{port}" for host, port in self.nodes]


def parse_redis_url(url: str) -> RedisTarget:
    """Read a URL of any supported form; raises :class:`InvalidRedisUrl`.

    Messages never repeat the URL: it may hold a password.
    """
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in _SCHEMES:
        known = ", ".join(f"{name}://" for name in _SCHEMES)
        raise InvalidRedisUrl(f"the URL scheme must be one of {known}")
    mode, tls = _SCHEMES[scheme.lower()]
    if mode == "single":
        return RedisTarget(mode, url, tls)
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, _, hosts = authority.rpartition("@")
    username, _, password = userinfo.partition(":")
    options = _options(query, tls=tls)
    service_name, db = _path(mode, path)
    return RedisTarget(
        mode,
        url,
        tls,
        nodes=tuple(_host_port(part) for part in hosts.split(",")),
        username=unquote(username) or None,
        password=unquote(password) or None,
        service_name=service_name,
        db=db,
        tls_options={k: v for k, v in options.items() if k not in _SENTINEL_OPTIONS},
        sentinel_auth={k: v for k, v in options.items() if k in _SENTINEL_OPTIONS},
    )


def _host_port(part: str) -> tuple[str, int]:
    host, _, port = part.strip().rpartition(":")
    host = host.strip("[]")  # an IPv6 literal: [::1]:7000
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidRedisUrl("every node must be written host:port, comma-separated")
    return host, int(port)


def _path(mode: Mode, path: str) -> tuple[str, int]:
    parts = [unquote(part) for part in path.split("/") if part]
    if mode == "cluster":
        if parts and parts != ["0"]:
            raise InvalidRedisUrl("a cluster has only database 0: drop the path")
        return "", 0
    if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise InvalidRedisUrl("a sentinel URL ends with /service_name or /service_name/db")
    return parts[0], int(parts[1]) if len(parts) == 2 else 0


def _options(query: str, *, tls: bool) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, values in parse_qs(query, keep_blank_values=True).items():
        value = _option_value(name, values[-1])
        if value is None:
            raise InvalidRedisUrl(f"unsupported or invalid URL option {name!r}")
        options[name] = value
    if not tls and set(options) - _SENTINEL_OPTIONS:
        raise InvalidRedisUrl("ssl_* options need a rediss+... URL")
    return options


def _option_value(name: str, value: str) -> str | bool | None:
    """The option's value as redis-py takes it, or None when it is not one we accept."""
    if name in _SENTINEL_OPTIONS or name in _TLS_PATH_OPTIONS:
        return value
    if name == "ssl_cert_reqs":
        return value if value in _CERT_REQS else None
    if name == "ssl_check_hostname" and value in ("true", "false"):
        return value == "true"
    return None
