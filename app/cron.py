"""Fire times of a schedule: a cron expression in an IANA time zone, or a fixed interval.

Pure functions, no I/O: the reconciler, the API (next fire times, backfill) and the
tests compute fire times the same way. Cron is evaluated by **cronsim** (no hand
parser): 5 fields, or 6 with seconds last, ``L``/``LW``/``#`` as Debian cron, and
DST as Debian cron handles it — a local time that does not exist on a spring-forward
day fires once at the first time after the gap, a local time that exists twice on
a fall-back day fires once (its first occurrence); a spec that fires every hour
(``30 * * * *``) fires in both copies of the repeated hour, because both are
different instants. Fire times are UTC epoch ms: two fires never share a number.

An interval schedule fires at ``anchor + k * interval`` (anchor: when it was
created or its interval last changed), so fires stay on a grid however late a
reconciler looks, and a backfill before the anchor lands on the same grid.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

CRON_MAX_CHARS = 256
# cronsim searches forward for a match; a spec that matches once in decades (Feb 29
# on a Monday) is still found, but none is looked for past this many years
SEARCH_YEARS = 30


class InvalidSpec(ValueError):
    """A cron expression, time zone or interval that cannot make fire times."""


def zone(name: str) -> ZoneInfo:
    """The IANA zone named ``name``; raises :class:`InvalidSpec` for an unknown one."""
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise InvalidSpec(f"unknown time zone {name[:64]!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSpec(f"unknown time zone {name[:64]!r}") from exc


@dataclass(frozen=True)
class Spec:
    """When a schedule fires: ``cron`` in ``timezone``, or every ``interval_ms`` from an anchor."""

    cron: str | None = None
    timezone: str = "UTC"
    interval_ms: int | None = None
    anchor_ms: int = 0

    def validate(self) -> None:
        """Raise :class:`InvalidSpec` unless exactly one of cron / interval makes fire times."""
        if (self.cron is None) == (self.interval_ms is None):
            raise InvalidSpec("give a cron expression or an interval, exactly one")
        if self.interval_ms is not None:
            if self.interval_ms < 1:
                raise InvalidSpec("interval must be at least 1 ms")
            return
        assert self.cron is not None
        if len(self.cron) > CRON_MAX_CHARS:
            raise InvalidSpec(f"cron expression is longer than {CRON_MAX_CHARS} characters")
        tz = zone(self.timezone)
        try:
            next(CronSim(self.cron, datetime.now(tz)))
        except (CronSimError, StopIteration, ValueError, KeyError, IndexError) as exc:
            raise InvalidSpec(f"cron expression {self.cron!r}: {exc}") from exc

    def after(self, after_ms: int) -> Iterator[int]:
        """Fire times strictly after ``after_ms`` (UTC epoch ms), in order, without end."""
        if self.interval_ms is not None:
            step = self.interval_ms
            k = (after_ms - self.anchor_ms) // step + 1  # before the anchor too (backfill)
            while True:
                yield self.anchor_ms + k * step
                k += 1
        assert self.cron is not None
        tz = zone(self.timezone)
        start = datetime.fromtimestamp(after_ms / 1000, tz=UTC).astimezone(tz)
        horizon = start.year + SEARCH_YEARS
        last = after_ms
        try:
            for fire in CronSim(self.cron, start):
                if fire.year > horizon:
                    return
                ms = int(fire.timestamp() * 1000)
                if ms > last:  # strictly increasing instants, whatever the wall clock did
                    last = ms
                    yield ms
        except (CronSimError, StopIteration):
            return

    def between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """At most ``limit`` fire times in ``(after_ms, until_ms]``, oldest first."""
        fires: list[int] = []
        for ms in self.after(after_ms):
            if ms > until_ms or len(fires) >= limit:
                break
            fires.append(ms)
        return fires

    def next_after(self, after_ms: int) -> int | None:
        """The first fire time after ``after_ms``, or None when there is none."""
        return next(self.after(after_ms), None)
