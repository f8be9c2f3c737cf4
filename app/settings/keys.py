"""Tenancy: stored API keys (``POST /keys``), namespaces and their quotas, the audit stream."""

from __future__ import annotations

from pydantic import Field

from app.settings.group import DAY_S, SettingsGroup


class KeySettings(SettingsGroup):
    """Scoped keys, namespaces and quotas: caches, rotation grace, bounds; the audit stream."""

    key_cache_ttl_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        allow_inf_nan=False,
        description="How long an API process trusts what it looked up about a stored key "
        "(found or not): a revoked key keeps working this long at most; 0 looks up every time",
    )
    key_cache_max_entries: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Lookups one API process caches (the oldest go first past it)",
    )
    key_rotation_grace_s: int = Field(
        default=3600,
        ge=0,
        le=30 * 24 * 3600,
        description="How long a rotated key's old secret keeps working (POST /keys/{id}/rotate)",
    )
    max_api_keys: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most live stored keys (POST /keys past it: 409)",
    )
    max_namespaces: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Most namespaces besides `default` (PUT /namespaces/{name} past it: 409)",
    )
    namespace_cache_ttl_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        allow_inf_nan=False,
        description="How long an API process trusts a namespace's record (its quotas, that "
        "it exists) before reading it again",
    )
    quota_usage_ttl_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        allow_inf_nan=False,
        description="How old a namespace's measured usage (live runs, stored bytes) may be "
        "when a create is judged against its quotas; also the Retry-After of such a 429",
    )
    audit_max_entries: int = Field(
        default=100_000,
        ge=100,
        le=10_000_000,
        description="Most entries the audit stream keeps (approximately: MAXLEN ~)",
    )
    audit_retention_s: float = Field(
        default=90 * DAY_S,
        gt=0,
        le=3650 * DAY_S,
        allow_inf_nan=False,
        description="How long an audit entry is kept",
    )
