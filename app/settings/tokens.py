"""Signed tokens: the signing keys' rotation, browser stream tokens, lease tokens."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import HOUR_S, SettingsGroup

DAY_S = 24 * HOUR_S


class TokenSettings(SettingsGroup):
    """The Ed25519 keys tokens are signed with (kept in Redis) and the tokens' lifetimes."""

    signing_key_rotate_s: float = Field(
        default=DAY_S,
        ge=1,
        le=365 * DAY_S,
        allow_inf_nan=False,
        description="A new signing key is made when the newest is this old; an old key stays "
        "in the JWKS until every token it can have signed has expired",
    )
    stream_token_ttl_s: float = Field(
        default=300.0,
        ge=1,
        le=HOUR_S,
        allow_inf_nan=False,
        description="Lifetime of a browser stream token (POST /runs/{id}/stream-token)",
    )
    lease_token_max_s: float = Field(
        default=HOUR_S,
        ge=1,
        le=DAY_S,
        allow_inf_nan=False,
        description="Longest lifetime of a lease token: its exp is the lease's expiry, never "
        "later than this after it was made",
    )
