"""Trusted hosts: the API answers only to the host names it is meant to be reached by.

Against DNS rebinding: a page on ``attacker.example`` re-resolves its own name to
``127.0.0.1`` (or to an address inside a private network) and then calls the API
from the victim's browser as same-origin. The browser sends ``Host:
attacker.example`` whatever the address, so a host name the deployment never
named is refused with 400 before anything else runs — authentication, CORS,
body parsing, Redis.

What is trusted: ``localhost``, ``127.0.0.1`` and ``::1`` always (only a client on
the same machine sends those, and ``leasehold probe api`` inside a container is
one), plus ``LEASEHOLD_TRUSTED_HOSTS``: exact names, ``*.example.com`` for its
subdomains, or ``*`` for any. An API that binds to a non-loopback address
without naming its hosts refuses to start (exit 2): whoever exposes it must say
by which names (or write ``*``).

``/healthz`` answers whatever the Host: orchestrators probe it by the pod's IP
address, and it reveals nothing (it never touches Redis).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import problem
from app.errors import ConfigurationError
from app.settings import ENV_PREFIX, LOOPBACK_HOSTS, Settings

ANY_HOST = "*"
PROBE_PATHS = frozenset({"/healthz"})
# a DNS name or an IP literal, optionally behind one leading "*." (subdomains only)
HOST_PATTERN = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9.-]{0,252}[a-z0-9])?$|^[0-9a-f:.]{2,45}$")


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1: only this machine can connect."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def trusted_hosts(settings: Settings) -> frozenset[str]:
    """The names this API answers to; raises ConfigurationError for an exposed, unnamed API.

    Each configured entry must be a host name (no port, no scheme), ``*.domain`` or ``*``.
    """
    names = {host.lower().rstrip(".") for host in settings.trusted_hosts}
    for name in names:
        if name != ANY_HOST and not HOST_PATTERN.fullmatch(name):
            raise ConfigurationError(
                f"invalid setting {ENV_PREFIX}TRUSTED_HOSTS: {name!r} is not a host name, "
                "'*.domain' or '*' (no scheme, no port)"
            )
    if not names and not is_loopback(settings.api_host):
        raise ConfigurationError(
            f"{ENV_PREFIX}TRUSTED_HOSTS must name the hosts clients reach this API by "
            f"(comma-separated, or * for any) when {ENV_PREFIX}API_HOST "
            f"({settings.api_host!r}) is not a loopback address: against DNS rebinding"
        )
    return frozenset(names | set(LOOPBACK_HOSTS))


def host_name(scope: Scope) -> str | None:
    """The Host header without its port, lower-cased; None when absent or malformed."""
    raw = next((value for name, value in scope.get("headers") or [] if name == b"host"), None)
    if raw is None:
        return None
    try:
        host = raw.decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return None
    if host.startswith("["):  # [::1]:8000
        literal, bracket, _ = host[1:].partition("]")
        return literal if bracket else None
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        host = name
    return host.rstrip(".") or None


def host_allowed(host: str | None, allowed: Iterable[str]) -> bool:
    """Exact names, ``*.domain`` for strict subdomains, ``*`` for anything (even no Host)."""
    names = set(allowed)
    if ANY_HOST in names:
        return True
    if host is None:
        return False
    if host in names:
        return True
    return any(
        name.startswith("*.") and host.endswith(name[1:]) and len(host) > len(name) - 1
        for name in names
    )


class TrustedHosts:
    """Pure ASGI middleware: 400 problem+json for a Host header nobody named."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 400 without calling the app."""
        if scope["type"] not in ("http", "websocket") or scope["path"] in PROBE_PATHS:
            await self.app(scope, receive, send)
            return
        host = host_name(scope)
        if host_allowed(host, self.hosts):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        response = problem(
            400,
            "Untrusted host",
            f"this API does not answer to the host {host!r}; its operator lists the names "
            f"it answers to in {ENV_PREFIX}TRUSTED_HOSTS",
            kind="untrusted-host",
        )
        await response(scope, receive, send)
