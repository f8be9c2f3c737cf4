"""How long a finished run's keys live: one value per terminal status, handed to Lua.

Every script that ends a run calls ``finalize`` (``scripts/lua/includes/finalize.lua``),
which sets the same expiry on the run's record, events, effects and idempotency
key: the run's own ``retention_ms`` when its create request set one, else the
value for the status it ended in. The values travel as one ARGV,
``"succeeded=<ms> failed=<ms> ..."``, read with ``string.match``: nothing to
decode, so nothing can fail after the script's first write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.models import TERMINAL_STATUSES
from app.settings import Settings

TERMINAL = frozenset(status.value for status in TERMINAL_STATUSES)


@dataclass(frozen=True)
class Retention:
    """Milliseconds a finished run is kept, for every terminal status."""

    by_status_ms: Mapping[str, int]
    _script_arg: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # finalize would PEXPIRE nil for a status the spec lacks: refuse it here
        if set(self.by_status_ms) != TERMINAL:
            raise ValueError(f"retention must name exactly {sorted(TERMINAL)}")
        if any(ms < 1 for ms in self.by_status_ms.values()):
            raise ValueError("every retention must be at least 1 ms")
        # built once: every create and every end sends it (a batch of 1,000 creates, 1,000 times)
        arg = " ".join(f"{status}={ms}" for status, ms in sorted(self.by_status_ms.items()))
        object.__setattr__(self, "_script_arg", arg)

    @classmethod
    def uniform(cls, ms: int) -> Retention:
        """The same retention whatever the status (tests, tools)."""
        return cls(dict.fromkeys(TERMINAL, ms))

    @classmethod
    def for_settings(cls, settings: Settings) -> Retention:
        """The per-status ``LEASEHOLD_RETENTION_*_S`` settings."""
        return cls(settings.retention_ms)

    def script_arg(self) -> str:
        """The ARGV form ``finalize`` reads: ``status=ms`` pairs, space-separated."""
        return self._script_arg
