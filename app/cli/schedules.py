"""``leasehold schedules ...``: cron and interval schedules, list to backfill."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import api_client as _api
from app.cli.api_calls import fail as _fail
from app.cli.api_calls import json_option as _json_option
from app.cli.options import ApiKey, ApiUrl, JsonFlag

if TYPE_CHECKING:
    from app.models.api import FireResult
    from app.models.read import Schedule

schedules_app = typer.Typer(
    rich_markup_mode=None,
    help="Cron and interval schedules: list, create, pause, trigger, backfill.",
    no_args_is_help=True,
)


def _print_schedule(schedule: Schedule, as_json: bool) -> None:
    if as_json:
        typer.echo(schedule.model_dump_json())
        return
    when = schedule.cron and f"cron {schedule.cron!r} ({schedule.timezone})"
    lines = [
        f"schedule  {schedule.id} (queue {schedule.queue}, version {schedule.version})",
        f"spec      {when or f'every {schedule.interval_s:g} s'}",
        f"policies  overlap {schedule.overlap}, missed {schedule.missed}"
        f"{'   PAUSED' if schedule.paused else ''}",
        f"run       {json.dumps(schedule.run)}",
        f"counts    fired {schedule.fired_count}, skipped {schedule.skipped_count}, "
        f"missed {schedule.missed_count}; last run {schedule.last_run_id or '-'}",
    ]
    lines += [f"next      {fire.isoformat()}" for fire in schedule.next_fires]
    typer.echo("\n".join(lines))


def _print_fired(result: FireResult, as_json: bool) -> None:
    if as_json:
        typer.echo(result.model_dump_json())
        return
    for run_id in result.created:
        typer.echo(f"created {run_id}")
    for run_id in result.cancelled:
        typer.echo(f"cancelled {run_id} (cancel_previous)")
    if result.buffered:
        typer.echo("buffered: starts when the previous run ends (buffer_one)")
    if result.skipped:
        typer.echo(f"skipped {result.skipped} (overlap policy, or its run exists already)")


@schedules_app.command("list")
def schedules_list(
    limit: Annotated[int, typer.Option(help="Schedules per page.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the page before.")] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Schedules by id, each with its next fire time."""
    with _api(api_url, api_key) as client:
        page = client.list_schedules(limit, cursor)
    if as_json:
        typer.echo(page.model_dump_json())
        return
    rows = [("schedule", "spec", "overlap", "next fire", "fired")]
    for item in page.items:
        spec = f"cron {item.cron}" if item.cron else f"every {item.interval_s:g}s"
        upcoming = "paused" if item.paused else _when(item.next_fire_at)
        rows.append((item.id, spec, item.overlap, upcoming, str(item.fired_count)))
    # each column as wide as its widest cell: ids and cron specs have no fixed length
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        typer.echo(" ".join([*cells, row[-1]]))
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


def _when(at: datetime | None) -> str:
    """A fire time to the second, in UTC (``2026-12-07 18:00:00Z``), or ``-``."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if at else "-"


@schedules_app.command("get")
def schedules_get(
    schedule_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """One schedule: spec, policies, counts and its next fire times."""
    with _api(api_url, api_key) as client:
        _print_schedule(client.get_schedule(schedule_id), as_json)


@schedules_app.command("create")
def schedules_create(
    schedule_id: str,
    handler: Annotated[str, typer.Option(help="The handler each fire runs.")],
    cron: Annotated[str | None, typer.Option(help="Cron expression (5 or 6 fields).")] = None,
    timezone: Annotated[str | None, typer.Option(help="IANA zone of --cron (UTC).")] = None,
    interval_s: Annotated[float | None, typer.Option(help="Or: every this many s.")] = None,
    input: Annotated[str, typer.Option("--input", help="Run input as JSON.")] = "{}",
    queue: Annotated[str | None, typer.Option(help="Queue of its runs.")] = None,
    overlap: Annotated[
        str | None, typer.Option(help="skip | allow | cancel_previous | buffer_one.")
    ] = None,
    missed: Annotated[str | None, typer.Option(help="skip | latest | all.")] = None,
    catchup_window_s: Annotated[float | None, typer.Option(help="Catch-up window (s).")] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Create a schedule; each fire creates one run of HANDLER."""
    payload = _json_option("--input", input)
    run = {"handler": handler, "input": payload, **({"queue": queue} if queue else {})}
    with _api(api_url, api_key) as client:
        schedule = client.create_schedule(
            schedule_id,
            run,
            cron=cron,
            timezone=timezone,
            interval_s=interval_s,
            overlap=overlap,
            missed=missed,
            catchup_window_s=catchup_window_s,
            paused=paused or None,
        )
    _print_schedule(schedule, as_json)


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Pause: nothing fires and nothing is counted missed until resumed."""
    with _api(api_url, api_key) as client:
        _print_schedule(client.pause_schedule(schedule_id), as_json)


@schedules_app.command("resume")
def schedules_resume(
    schedule_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Resume: it fires from its next fire time after now."""
    with _api(api_url, api_key) as client:
        _print_schedule(client.resume_schedule(schedule_id), as_json)


@schedules_app.command("delete")
def schedules_delete(schedule_id: str, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Delete a schedule; the runs it made stay."""
    with _api(api_url, api_key) as client:
        client.delete_schedule(schedule_id)
    typer.echo(f"deleted {schedule_id}")


@schedules_app.command("trigger")
def schedules_trigger(
    schedule_id: str,
    overlap: Annotated[str | None, typer.Option(help="This fire's overlap policy.")] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Fire once now, under the schedule's overlap policy (or --overlap)."""
    with _api(api_url, api_key) as client:
        _print_fired(client.trigger_schedule(schedule_id, overlap), as_json)


@schedules_app.command("backfill")
def schedules_backfill(
    schedule_id: str,
    start: Annotated[str, typer.Option(help="RFC 3339 start (inclusive).")],
    end: Annotated[str, typer.Option(help="RFC 3339 end (inclusive).")],
    overlap: Annotated[str | None, typer.Option(help="Overlap policy (allow).")] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Fire every fire time in [START, END] now (at most LEASEHOLD_SCHEDULE_BACKFILL_MAX_FIRES)."""
    from datetime import datetime

    try:
        begin, until = datetime.fromisoformat(start), datetime.fromisoformat(end)
    except ValueError as exc:
        raise _fail(f"--start/--end: {exc}") from None
    with _api(api_url, api_key) as client:
        _print_fired(client.backfill_schedule(schedule_id, begin, until, overlap), as_json)
