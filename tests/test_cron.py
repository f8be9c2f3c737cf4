"""Fire times by cronsim: DST transitions neither skip nor double a fire; hostile specs refused."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from app.cron import InvalidSpec, Spec


def ms(text: str, zone: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


def local(fires: list[int], zone: str) -> list[str]:
    return [
        datetime.fromtimestamp(f / 1000, tz=UTC).astimezone(ZoneInfo(zone)).isoformat()
        for f in fires
    ]


def fires(cron: str, zone: str, start: str, end: str) -> list[int]:
    spec = Spec(cron=cron, timezone=zone)
    return spec.between(ms(start, zone) - 1, ms(end, zone), 1000)  # start included


@pytest.mark.parametrize(
    ("zone", "spring", "fall"),
    [
        ("Europe/Berlin", "2024-03-31", "2024-10-27"),
        ("America/New_York", "2024-03-10", "2024-11-03"),
    ],
)
def test_a_daily_fire_in_the_skipped_hour_fires_once_after_the_gap(
    zone: str, spring: str, fall: str
) -> None:
    got = local(fires("30 2 * * *", zone, f"{spring}T00:00", f"{spring}T23:59"), zone)
    assert len(got) == 1  # not skipped, not doubled
    assert got[0].startswith(f"{spring}T03:")


@pytest.mark.parametrize(
    ("zone", "fall"), [("Europe/Berlin", "2024-10-27"), ("America/New_York", "2024-11-03")]
)
def test_a_daily_fire_in_the_repeated_hour_fires_once(zone: str, fall: str) -> None:
    hour = "02" if zone == "Europe/Berlin" else "01"
    got = fires(f"30 {int(hour)} * * *", zone, f"{fall}T00:00", f"{fall}T23:59")
    assert len(got) == 1


@pytest.mark.parametrize(
    ("zone", "spring", "fall"),
    [
        ("Europe/Berlin", "2024-03-31", "2024-10-27"),
        ("America/New_York", "2024-03-10", "2024-11-03"),
    ],
)
@pytest.mark.parametrize(("cron", "per_hour"), [("30 * * * *", 1), ("*/30 * * * *", 2)])
def test_sub_daily_specs_fire_once_per_real_hour_across_both_transitions(
    zone: str, spring: str, fall: str, cron: str, per_hour: int
) -> None:
    """23 real hours on the spring day, 25 on the fall day: one fire per instant, none twice."""
    for day, hours in ((spring, 23), (fall, 25)):
        got = fires(cron, zone, f"{day}T00:00", f"{day}T23:59:59")
        assert len(got) == hours * per_hour, (day, local(got, zone))
        assert len(set(got)) == len(got)
        gaps = {b - a for a, b in itertools.pairwise(got)}
        assert gaps == {3_600_000 // per_hour}  # evenly spaced in real time: nothing skipped


def test_fire_times_are_strictly_after_the_start() -> None:
    spec = Spec(cron="0 * * * *", timezone="UTC")
    start = int(datetime(2026, 1, 1, 5, 0, tzinfo=UTC).timestamp() * 1000)
    assert spec.next_after(start) == start + 3_600_000


def test_an_interval_fires_on_a_grid_from_its_anchor_before_and_after_it() -> None:
    spec = Spec(interval_ms=1000, anchor_ms=10_500)
    assert spec.between(10_500, 13_500, 10) == [11_500, 12_500, 13_500]
    assert spec.between(7_000, 10_500, 10) == [7_500, 8_500, 9_500, 10_500]
    assert spec.between(0, 10**12, 3) == [500, 1500, 2500]  # bounded, however long the range


def test_seconds_in_a_sixth_field_are_supported() -> None:
    spec = Spec(cron="*/15 * * * * *", timezone="UTC")
    assert spec.between(0, 60_000, 10) == [15_000, 30_000, 45_000, 60_000]


@pytest.mark.parametrize(
    "spec",
    [
        Spec(cron="61 * * * *"),
        Spec(cron="* * * *"),
        Spec(cron="not cron"),
        Spec(cron="0 0 30 2 *"),  # never matches
        Spec(cron="* " * 200),
        Spec(cron="@daily"),
        Spec(cron="0 * * * *", timezone="Mars/Olympus_Mons"),
        Spec(cron="0 * * * *", timezone="../../etc/passwd"),
        Spec(cron="0 * * * *", timezone=""),
        Spec(cron="0 * * * *", interval_ms=1000),
        Spec(),
        Spec(interval_ms=0),
    ],
)
def test_specs_that_cannot_make_fire_times_are_refused(spec: Spec) -> None:
    with pytest.raises(InvalidSpec):
        spec.validate()
