"""API keys and the audit stream: roles, what a key's owner sends and reads back.

A role is one of four, ordered: ``read`` < ``submit`` < ``operate`` < ``admin``; a key
holds one role and may call every route whose declared role (``app.api.scopes``) is at
or below it. A key bound to a namespace reaches that namespace's objects only; an
unbound one (the bootstrap keys, every ``admin`` key) reaches every namespace, the
request naming one with the ``Leasehold-Namespace`` header.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import ConfigDict, Field

from app.models import BaseModel
from app.namespaces import NAMESPACE_PATTERN

KEY_NAME_PATTERN = r"^[A-Za-z0-9_.:@-]{1,64}$"
KEY_ID_PATTERN = r"^k[0-9a-f]{16}$"
# the longest a key may live: ten years, like a run's longest keep (app.settings.group)
KEY_EXPIRY_MAX_S = 10 * 365 * 24 * 3600
GRACE_MAX_S = 30 * 24 * 3600


class Role(StrEnum):
    """What a key may do, ordered: each role may do everything of the roles before it."""

    READ = "read"
    SUBMIT = "submit"
    OPERATE = "operate"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """Its place in the order, ``read`` = 0."""
        return list(Role).index(self)

    def allows(self, needed: Role) -> bool:
        """Whether a key of this role may call a route that needs ``needed``."""
        return self.rank >= needed.rank


class KeyCreate(BaseModel):
    """``POST /keys``: a new key's name, role, namespace and lifetime.

    Unknown fields are refused: a misspelt ``namespace`` must not make a key that
    silently reaches every namespace.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=KEY_NAME_PATTERN, description="Who holds the key (shown in audit)")
    role: Role
    namespace: str | None = Field(
        default=None,
        pattern=NAMESPACE_PATTERN,
        description="The one namespace the key reaches; none: every namespace (the request "
        "names one with Leasehold-Namespace). An admin key is never bound",
    )
    expires_in_s: int | None = Field(
        default=None,
        ge=1,
        le=KEY_EXPIRY_MAX_S,
        description="Seconds until the key stops working; none: until revoked",
    )


class KeyRotate(BaseModel):
    """``POST /keys/{key_id}/rotate``: how long the old secret keeps working."""

    model_config = ConfigDict(extra="forbid")

    grace_s: int | None = Field(
        default=None,
        ge=0,
        le=GRACE_MAX_S,
        description="Seconds the old secret stays valid; default LEASEHOLD_KEY_ROTATION_GRACE_S",
    )


class KeyInfo(BaseModel):
    """A stored key as ``GET /keys`` shows it: never its secret, nor the secret's digest."""

    id: str = Field(pattern=KEY_ID_PATTERN)
    name: str
    role: Role
    namespace: str | None = Field(default=None, description="None: every namespace")
    created_at: datetime
    expires_at: datetime | None = None
    rotated_at: datetime | None = None
    previous_valid_until: datetime | None = Field(
        default=None, description="Until when the secret before the last rotation still works"
    )


class KeySecret(KeyInfo):
    """A key with its secret: the one answer that carries it (create, rotate)."""

    secret: str = Field(description="Send as `Authorization: Bearer <secret>`; shown only once")


class KeyPage(BaseModel):
    """``GET /keys``: every live key, oldest first."""

    items: list[KeyInfo]


class AuditEntry(BaseModel):
    """One ``operate`` or ``admin`` call, as the audit stream recorded it."""

    id: str = Field(description="The entry's stream id (a cursor: `before=`)")
    at: datetime = Field(description="When it was recorded, by the Redis server's clock")
    key_id: str = Field(description="The key's id, or `bootstrap` for LEASEHOLD_API_KEYS")
    key_name: str
    role: Role
    namespace: str = Field(description="The namespace the call addressed")
    method: str
    path: str
    status: int
    client: str = Field(description="The client's address, as the server saw it")


class AuditPage(BaseModel):
    """``GET /audit``: newest first; ``next_cursor`` reads older entries."""

    items: list[AuditEntry]
    next_cursor: str | None = None
