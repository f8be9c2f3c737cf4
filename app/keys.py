"""Bearer keys: how a presented key is compared with the configured ones.

One implementation for every listener that takes ``LEASEHOLD_API_KEYS``: the
API's middleware (``app.api.auth``) and a worker's metrics port
(``app.telemetry.metrics_server``). The SHA-256 of the presented key is compared with the
SHA-256 of *every* configured key through :func:`hmac.compare_digest`, without
stopping at the first match: digests have one length, so the response time says
nothing about a key's length, how much of it was right, or which key it was.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable


def bearer_credentials(header: bytes) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    scheme, _, token = header.partition(b" ")
    if scheme.lower() == b"bearer" and token.strip():
        return bytes(token.strip())
    return None


def key_digest(key: bytes) -> bytes:
    """What is compared: a fixed-length digest, so lengths leak nothing."""
    return hashlib.sha256(key).digest()


def key_matches(presented: bytes, key_digests: Iterable[bytes]) -> bool:
    """Constant-time membership: compares against every key's digest, whatever matched first."""
    candidate = key_digest(presented)
    matched = False
    for digest in key_digests:
        matched |= hmac.compare_digest(candidate, digest)
    return matched
