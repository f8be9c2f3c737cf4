"""Check a Leasehold token without the rest of Leasehold: PyJWT and the stdlib only.

Copy this module next to any tool (``pip install "PyJWT[crypto]"``) to check the tokens
Leasehold signs (Ed25519, ``alg: EdDSA``, keys published at
``GET /.well-known/jwks.json``):

* :func:`decode` checks one token against a key set you hold (offline): signature,
  algorithm (only EdDSA: ``alg: none`` and HMAC tricks are refused), issuer,
  audience, expiry.
* :class:`LeaseVerifier` checks a **lease token** (``ctx.lease_token(audience=...)``):
  offline against the JWKS (fetched from the API and kept, fetched again for an unknown
  ``kid``), and with ``online=True`` it also asks ``GET /leases/{run_id}`` whether the
  token's owner and fence still hold the run, so a worker taken over after a pause is
  refused *before* its token expires. Answers are kept for a third of the token's
  lifetime (about TTL/3), so a stale owner is refused within one lease TTL.

Every refusal is a :class:`TokenRefused` with the HTTP status a gate answers: 401 for a
token that is not valid, 409 for a valid token whose fence is no longer current.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

ALGORITHMS = ("EdDSA",)
ISSUER = "leasehold"
STREAM_AUDIENCE = "leasehold-stream"
JWKS_PATH = "/.well-known/jwks.json"
# the claims every Leasehold token carries
REQUIRED_CLAIMS = ("iss", "aud", "exp", "iat", "sub")
LEASE_CLAIMS = ("queue", "owner", "fence")
# the header that names a request's namespace (app.namespaces.NAMESPACE_HEADER; this
# module is used without the rest of Leasehold, so it imports nothing of it)
NAMESPACE_HEADER = "Leasehold-Namespace"
HTTP_TIMEOUT_S = 5.0
# an unknown kid fetches the key set again at most this often (a forged kid costs nothing)
REFETCH_MIN_S = 10.0


class TokenRefused(Exception):
    """The token is refused: ``status`` 401 (not valid) or 409 (stale fence), ``reason``."""

    def __init__(self, reason: str, *, status: int = 401) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class TokenExpired(TokenRefused):
    """A token that was valid once and has expired (401): told apart for the API's metrics."""


def decode(
    token: str, keys: Mapping[str, Any], *, audience: str, leeway_s: float = 0.0
) -> dict[str, Any]:
    """The claims of ``token`` if a key of the JWKS ``keys`` signed it for ``audience``.

    Raises :class:`TokenRefused` (401) for anything else: malformed, unknown ``kid``, an
    algorithm other than EdDSA, a bad signature, another issuer or audience, expired, or
    a required claim missing.
    """
    key = _key_for(token, keys)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=list(ALGORITHMS),
            audience=audience,
            issuer=ISSUER,
            leeway=leeway_s,
            options={"require": list(REQUIRED_CLAIMS)},
        )
    except jwt.ExpiredSignatureError as exc:
        raise TokenExpired("the token has expired") from exc
    except jwt.InvalidTokenError as exc:
        raise TokenRefused(f"the token is not valid: {exc}") from exc
    return claims


def key_id(token: str) -> str | None:
    """The ``kid`` a token names (unverified), or None when it names none or is malformed."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.InvalidTokenError:
        return None
    return kid if isinstance(kid, str) else None


def _key_for(token: str, keys: Mapping[str, Any]) -> jwt.PyJWK:
    kid = key_id(token)
    for entry in keys.get("keys", []):
        if entry.get("kid") == kid and kid is not None:
            try:
                return jwt.PyJWK(entry, algorithm=ALGORITHMS[0])
            except jwt.PyJWKError as exc:
                raise TokenRefused(f"the signing key is not usable: {exc}") from exc
    raise TokenRefused("the token names no known signing key")


@dataclass(frozen=True)
class LeaseClaims:
    """What a valid lease token says: run, namespace, queue, owner, fence, claim, expiry
    (epoch s)."""

    run_id: str
    namespace: str
    queue: str
    owner_id: str
    fence: int
    claim_id: str | None
    audience: str
    issued_at: float
    expires_at: float

    @classmethod
    def of(cls, claims: Mapping[str, Any], audience: str) -> LeaseClaims:
        """Raises :class:`TokenRefused` when a lease claim is missing or mistyped."""
        missing = [name for name in LEASE_CLAIMS if name not in claims]
        if missing or not isinstance(claims["fence"], int):
            raise TokenRefused(f"not a lease token (claims {missing or ['fence']} wrong)")
        return cls(
            run_id=str(claims["sub"]),
            # a token from before namespaces: the default one
            namespace=str(claims.get("ns", "default")),
            queue=str(claims["queue"]),
            owner_id=str(claims["owner"]),
            fence=claims["fence"],
            claim_id=claims.get("claim"),
            audience=audience,
            issued_at=float(claims["iat"]),
            expires_at=float(claims["exp"]),
        )


class LeaseVerifier:
    """Checks lease tokens for one audience, offline and (``online``) against the fence.

    ``api_url``: the Leasehold API (its JWKS and, online, ``GET /leases/{run_id}`` with
    ``api_key``); ``jwks``: a key set to use instead of fetching one (offline only unless
    ``api_url`` is given too). Thread-safe; blocking (urllib): call it from a thread in an
    event loop.
    """

    def __init__(
        self,
        *,
        audience: str,
        api_url: str | None = None,
        api_key: str | None = None,
        jwks: Mapping[str, Any] | None = None,
        online: bool = True,
        leeway_s: float = 0.0,
    ) -> None:
        if api_url is None and (jwks is None or online):
            raise ValueError("an api_url is needed to fetch the keys or check fences online")
        self.audience = audience
        self.api_url = api_url.rstrip("/") if api_url else None
        self.api_key = api_key
        self.online = online
        self.leeway_s = leeway_s
        self._jwks: Mapping[str, Any] | None = jwks
        self._fixed_keys = jwks is not None
        self._fetched_at = -REFETCH_MIN_S
        self._current: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def verify(self, token: str) -> LeaseClaims:
        """The token's claims if it is valid now (and, online, its fence is current).

        Raises :class:`TokenRefused`: 401 not valid, 409 stale fence or no longer held.
        """
        claims = LeaseClaims.of(self._decode(token), self.audience)
        if self.online:
            self._check_current(claims)
        return claims

    def _decode(self, token: str) -> dict[str, Any]:
        keys = self._keys()
        if not self._fixed_keys and not _names_known_key(token, keys):
            keys = self._keys(fresh=True)  # a key made since we fetched
        return decode(token, keys, audience=self.audience, leeway_s=self.leeway_s)

    def _keys(self, *, fresh: bool = False) -> Mapping[str, Any]:
        with self._lock:
            due = time.monotonic() - self._fetched_at >= REFETCH_MIN_S
            if self._jwks is None or (fresh and due and not self._fixed_keys):
                self._jwks = self._get(JWKS_PATH, auth=False)
                self._fetched_at = time.monotonic()
            return self._jwks

    def _check_current(self, claims: LeaseClaims) -> None:
        lease = self._lease(claims)
        if lease.get("owner_id") != claims.owner_id or lease.get("fence") != claims.fence:
            raise TokenRefused(
                f"stale lease: run {claims.run_id} is at fence {lease.get('fence')}, "
                f"the token holds fence {claims.fence}",
                status=409,
            )
        if not lease.get("held"):
            raise TokenRefused(f"run {claims.run_id} is no longer leased", status=409)

    def _lease(self, claims: LeaseClaims) -> dict[str, Any]:
        """The run's lease, kept for a third of the token's lifetime (about TTL/3)."""
        now = time.monotonic()
        with self._lock:
            kept = self._current.get(claims.run_id)
        # fences only move forward: a kept answer at this fence or past it still decides
        # (a zombie's calls cost no request); a token newer than the answer asks again
        if kept is not None and kept[0] > now and _fence(kept[1]) >= claims.fence:
            return kept[1]
        lease = self._get(f"/leases/{claims.run_id}", auth=True, namespace=claims.namespace)
        keep_s = max(0.0, (claims.expires_at - claims.issued_at) / 3)
        with self._lock:
            self._current[claims.run_id] = (now + keep_s, lease)
            if len(self._current) > 10_000:  # bounded: forget the oldest half
                for run_id in list(self._current)[:5_000]:
                    del self._current[run_id]
        return lease

    def _get(self, path: str, *, auth: bool, namespace: str | None = None) -> dict[str, Any]:
        assert self.api_url is not None
        request = urllib.request.Request(self.api_url + path)
        if auth and self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        if namespace is not None:
            # the run's namespace: a run id alone names a run only within one
            request.add_header(NAMESPACE_HEADER, namespace)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                answer: dict[str, Any] = json.load(response)
                return answer
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and path.startswith("/leases/"):
                raise TokenRefused("the run does not exist", status=409) from exc
            raise TokenRefused(f"Leasehold answered {exc.code} for {path}", status=503) from exc
        except (OSError, ValueError) as exc:
            raise TokenRefused(f"Leasehold could not be asked: {exc}", status=503) from exc


def _names_known_key(token: str, keys: Mapping[str, Any]) -> bool:
    kid = key_id(token)
    return any(entry.get("kid") == kid for entry in keys.get("keys", []))


def _fence(lease: Mapping[str, Any]) -> int:
    fence = lease.get("fence")
    return fence if isinstance(fence, int) else -1
