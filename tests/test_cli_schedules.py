"""``leasehold schedules ...`` as a user runs it, against a real API."""

from __future__ import annotations

from app.models.api import FireResult, SchedulePage
from app.models.read import Schedule
from tests.test_cli import api_url, leasehold, one_error_line  # noqa: F401  (fixture)


def test_create_list_trigger_pause_and_delete_a_schedule(api_url: str) -> None:  # noqa: F811
    made = leasehold(
        "schedules", "create", "nightly", "--handler", "demo.echo",
        "--input", '{"message": "hi"}', "--cron", "30 2 * * *", "--timezone", "Europe/Berlin",
        "--json", api_url=api_url,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    schedule = Schedule.model_validate_json(made.stdout)
    assert len(schedule.next_fires) == 5
    human = leasehold("schedules", "get", "nightly", api_url=api_url).stdout
    assert "cron '30 2 * * *' (Europe/Berlin)" in human
    assert human.count("next      ") == 5
    listed = leasehold("schedules", "list", api_url=api_url).stdout.splitlines()
    header, row = listed[0], listed[1]
    assert row.startswith("nightly") and " 01:30:00Z " in row
    # every column starts where its header does
    for title in ("spec", "overlap", "next fire", "fired"):
        at = header.index(title)
        assert row[at - 1] == " " and row[at] != " ", (title, header, row)
    page = SchedulePage.model_validate_json(
        leasehold("schedules", "list", "--json", api_url=api_url).stdout
    )
    assert [item.id for item in page.items] == ["nightly"]
    fired = leasehold("schedules", "trigger", "nightly", "--json", api_url=api_url)
    assert len(FireResult.model_validate_json(fired.stdout).created) == 1
    skipped = leasehold("schedules", "trigger", "nightly", api_url=api_url)
    assert "skipped 1" in skipped.stdout  # the first run is still queued (overlap skip)
    assert "PAUSED" in leasehold("schedules", "pause", "nightly", api_url=api_url).stdout
    assert leasehold("schedules", "delete", "nightly", api_url=api_url).stdout.strip() == (
        "deleted nightly"
    )


def test_a_bad_cron_is_one_error_line(api_url: str) -> None:  # noqa: F811
    done = leasehold(
        "schedules", "create", "bad", "--handler", "demo.echo", "--cron", "61 * * * *",
        api_url=api_url,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cron" in one_error_line(done)
