"""A place in a zset of runs scored by ms, and the opaque page cursor that names it.

The runs listing (by created_at) and a parent's children index (by the ms each
entry was written) both page through ``(score, run id)`` order, which stays
valid while runs are added: one position type, one cursor format.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from app.store.keys import queue_of


class InvalidCursor(ValueError):
    """A list cursor that this store did not produce."""


@dataclass(frozen=True, order=True)
class Position:
    """A place in ``(score ms, run id)`` order."""

    score: int
    run_id: str

    def encode(self) -> str:
        """The position as an opaque page cursor."""
        raw = f"{self.score}:{self.run_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: str) -> Position:
        """A cursor :meth:`encode` made; raises :class:`InvalidCursor` for anything else."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
            score, run_id = raw.split(":", 1)
            position = cls(int(score), run_id)
        except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
            raise InvalidCursor("cursor is not one this API returned") from exc
        if queue_of(run_id) is None:
            raise InvalidCursor("cursor is not one this API returned")
        return position
