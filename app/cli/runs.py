"""``leasehold runs ...``: inspect, follow, cancel, resolve, retry, delete and purge runs."""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.api_calls import EXIT_FAILED, show_run
from app.cli.api_calls import api_client as _api
from app.cli.api_calls import json_option as _json_option
from app.cli.api_calls import print_run as _print_run
from app.cli.api_calls import unpark_lines as _unpark_lines
from app.cli.options import ApiKey, ApiUrl, JsonFlag, PageCursor, PageSize
from app.render import error_words
from app.statuses import PARKED_STATUSES, TERMINAL_EVENT_TYPES, RunStatus

# start-up is what `runs get` in a shell loop pays each time (BENCHMARKS.md): what only some
# commands need (asyncio, redis through the probes and handlers, pydantic-settings, httpx,
# rich) is imported inside those commands, not here
if TYPE_CHECKING:
    from app.client import Client
    from app.models.read import RunPage

runs_app = typer.Typer(
    rich_markup_mode=None,
    help="Inspect, cancel, resolve, retry, delete and purge runs.",
    no_args_is_help=True,
)


@runs_app.command("get")
def runs_get(
    run_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Show one run."""
    show_run(run_id, as_json=as_json, api_url=api_url, api_key=api_key)


@runs_app.command("watch")
def runs_watch(
    run_id: str,
    last_event_id: Annotated[str | None, typer.Option(help="Resume after this event id.")] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="The run and all its children, until all ended.")
    ] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Follow a run's events live until it ends (reconnects by itself)."""
    with _api(api_url, api_key) as client:
        code = _follow(client, run_id, as_json, last_event_id=last_event_id, tree=tree)
    raise typer.Exit(code)


def _follow(
    client: Client,
    run_id: str,
    as_json: bool,
    *,
    last_event_id: str | None = None,
    tree: bool = False,
) -> int:
    """Print a run's events until its terminal one; exit code 0 only if it succeeded.

    ``tree``: its children's too, each line naming its run, until the whole tree
    ended; the exit code is still the run's own outcome.
    """
    from app.render import EventPrinter

    printer = EventPrinter(sys.stdout, name_runs=tree)
    outcome = ""
    for event in client.events(run_id, last_event_id=last_event_id, include_children=tree):
        if as_json:
            typer.echo(event.model_dump_json())
        else:
            printer.show(event)
            if event.run_id == run_id:
                _hint_if_still_parked(client, run_id, event.type)
        if event.run_id == run_id and event.type in TERMINAL_EVENT_TYPES:
            outcome = event.type
    return 0 if outcome == RunStatus.SUCCEEDED.value else EXIT_FAILED


def _hint_if_still_parked(client: Client, run_id: str, event_type: str) -> None:
    """After a park event: if the run still waits, say what unparks it (the stream goes quiet).

    A replayed park that a person already answered gets no hint: one GET tells them apart.
    """
    if event_type not in (status.value for status in PARKED_STATUSES):
        return
    run = client.get(run_id)
    if run.status.is_parked:
        for line in _unpark_lines(run):
            typer.echo(f"   {line}")


@runs_app.command("export")
def runs_export(
    run_id: str,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")
    ] = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Export a run's history (GET /runs/{id}/history) for app.testing.replay in CI."""
    from pathlib import Path

    with _api(api_url, api_key) as client:
        history = client.history(run_id)
    text = history.model_dump_json(indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        typer.echo(f"cannot write {output}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    cut = " (events truncated)" if history.events_truncated else ""
    typer.echo(
        f"{run_id}: {len(history.steps)} steps, {len(history.events)} events{cut} -> {output}"
    )


@runs_app.command("list")
def runs_list(
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    status: Annotated[RunStatus | None, typer.Option(help="Only this status.")] = None,
    handler: Annotated[str | None, typer.Option(help="Only this handler.")] = None,
    parent: Annotated[str | None, typer.Option(help="Only children of this run.")] = None,
    root: Annotated[str | None, typer.Option(help="Only runs of this run's tree.")] = None,
    limit: PageSize = 20,
    cursor: PageCursor = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """List runs, newest first."""
    with _api(api_url, api_key) as client:
        page = client.list_runs(
            queue=queue,
            status=status.value if status else None,
            handler=handler,
            parent_id=parent,
            root_id=root,
            limit=limit,
            cursor=cursor,
        )
    _print_page(page, as_json)


@runs_app.command("children")
def runs_children(
    run_id: str,
    limit: PageSize = 20,
    cursor: PageCursor = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """List the runs a run spawned, oldest first."""
    with _api(api_url, api_key) as client:
        page = client.children(run_id, limit=limit, cursor=cursor)
    _print_page(page, as_json)


def _print_page(page: RunPage, as_json: bool) -> None:
    """A page of runs, one line each, and the cursor of the next page if there is one."""
    if as_json:
        typer.echo(page.model_dump_json())
        return
    if not page.items:
        typer.echo("no runs")
    for run in page.items:
        # an ended run's line ends with why it ended, as `runs get` words it
        why = run.error if run.status.is_terminal else None
        typer.echo(
            f"{run.id}  {run.status.value:<24} {run.handler:<16} "
            f"attempt {run.attempt}/{run.max_attempts}  {run.created_at:%Y-%m-%d %H:%M:%S}"
            + (f"  {error_words(why.code, why.message)}" if why else "")
        )
    if page.next_cursor:
        typer.echo(f"next: --cursor {page.next_cursor}")


@runs_app.command("cancel")
def runs_cancel(
    run_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Cancel a run (idempotent)."""
    with _api(api_url, api_key) as client:
        result = client.cancel(run_id)
    typer.echo(result.model_dump_json() if as_json else f"{result.id}: {result.status.value}")


@runs_app.command("upgrade")
def runs_upgrade(
    run_id: str,
    to: Annotated[
        str | None, typer.Option("--to", help="Pin it to this build (default: to none).")
    ] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Move a pinned run off its build (409 when it is not pinned or has ended)."""
    with _api(api_url, api_key) as client:
        run = client.upgrade(run_id, to)
    typer.echo(run.model_dump_json() if as_json else f"{run.id}: pinned to {run.pinned_build}")


@runs_app.command("priority")
def runs_priority(
    run_id: str,
    priority: Annotated[int, typer.Argument(help="-100..100, higher first")],
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Change a queued run's priority (409 once it started)."""
    with _api(api_url, api_key) as client:
        run = client.set_priority(run_id, priority)
    typer.echo(run.model_dump_json() if as_json else f"{run.id}: priority {run.priority}")


@runs_app.command("delete")
def runs_delete(
    run_id: str,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Delete a finished run now, with its events and idempotency key (409 if not finished)."""
    if not yes:
        typer.confirm(f"Delete {run_id} and its whole history?", abort=True)
    with _api(api_url, api_key) as client:
        client.delete(run_id)
    typer.echo(f"{run_id}: deleted")


@runs_app.command("purge")
def runs_purge(
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    status: Annotated[RunStatus | None, typer.Option(help="Only this terminal status.")] = None,
    handler: Annotated[str | None, typer.Option(help="Only this handler.")] = None,
    finished_before: Annotated[
        str | None,
        typer.Option(
            help="Only runs finished before this RFC 3339 time, e.g. 2026-11-01T00:00:00Z."
        ),
    ] = None,
    batch: Annotated[int, typer.Option(help="Runs looked at per request.", min=1)] = 100,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Delete every finished run the filters match, batch after batch, until none is left.

    Only terminal runs are deleted, never one that is queued, running or parked.
    """
    filters = {
        "queue": queue,
        "status": status.value if status else None,
        "handler": handler,
        "finished_before": finished_before,
    }
    named = ", ".join(f"{k}={v}" for k, v in filters.items() if v) or "no filter"
    if not yes:
        typer.confirm(f"Delete every finished run matching {named}?", abort=True)
    deleted = 0
    cursor: str | None = None
    with _api(api_url, api_key) as client:
        while True:
            result = client.purge(**filters, limit=batch, cursor=cursor)
            deleted += result.deleted
            if not as_json:
                typer.echo(f"deleted {result.deleted} (total {deleted})")
            if result.done:
                break
            cursor = result.next_cursor
    if as_json:
        typer.echo(json.dumps({"deleted": deleted}))


@runs_app.command("resume")
def runs_resume(
    run_id: str,
    input: Annotated[str, typer.Option("--input", help="What you decided, as JSON.")] = "null",
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Resume a run waiting for a person; its handler sees the input as ctx.resume_input."""
    payload = _json_option("--input", input)
    with _api(api_url, api_key) as client:
        result = client.resume(run_id, payload)
    typer.echo(result.model_dump_json() if as_json else f"{result.id}: {result.status.value}")


@runs_app.command("signal")
def runs_signal(
    run_id: str,
    name: str,
    payload: Annotated[str, typer.Option("--payload", help="What it carries, as JSON.")] = "null",
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Send a run signal NAME: wakes its ctx.wait_for_signal(NAME), or waits in its inbox."""
    value = _json_option("--payload", payload)
    with _api(api_url, api_key) as client:
        result = client.signal(run_id, name, value)
    typer.echo(
        result.model_dump_json() if as_json else f"{result.id}: signal {name} {result.outcome}"
    )


class ResolveChoice(StrEnum):
    """What a person decides for a reconciliation_required run."""

    RETRY = "retry"
    FAIL = "fail"
    SUCCEED = "succeed"


class EffectOutcomeChoice(StrEnum):
    """What a person found out about the effects whose outcome was unknown."""

    APPLIED = "applied"
    NOT_APPLIED = "not_applied"


@runs_app.command("resolve")
def runs_resolve(
    run_id: str,
    action: Annotated[ResolveChoice, typer.Option("--action", help="What happens to the run.")],
    effect_outcome: Annotated[
        EffectOutcomeChoice | None,
        typer.Option(
            "--effect-outcome",
            help="Did the unknown effect happen? applied: never repeat it; not_applied: "
            "run it again. Required with --action retry.",
        ),
    ] = None,
    effect_result: Annotated[
        str | None, typer.Option("--effect-result", help="Its result to record, as JSON.")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", help="The run's output as JSON (succeed).")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Why, for the history.")] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Decide a run parked in reconciliation_required: retry, fail or succeed it."""
    decision = {
        "output": _json_option("--output", output),
        "effect_outcome": effect_outcome.value if effect_outcome else None,
        "effect_result": _json_option("--effect-result", effect_result),
        "note": note,
    }
    with _api(api_url, api_key) as client:
        run = client.resolve(run_id, action.value, **decision)
    _print_run(run, as_json)


class CheckpointChoice(StrEnum):
    """Where a re-run starts: the old run's last checkpoint, or the beginning."""

    KEEP = "keep"
    DROP = "drop"


@runs_app.command("retry")
def runs_retry(
    run_id: str,
    checkpoint: Annotated[
        CheckpointChoice,
        typer.Option("--checkpoint", help="keep: start from its last checkpoint; drop: anew."),
    ] = CheckpointChoice.KEEP,
    max_attempts: Annotated[
        int | None, typer.Option(help="Attempts of the new run (default: the old run's).")
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Re-run a failed, orphaned, cancelled or expired run as a new linked run.

    Recorded effects are replayed, not repeated; the old run is left as it ended.
    """
    with _api(api_url, api_key) as client:
        run = client.retry(
            run_id,
            checkpoint=checkpoint.value,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
        )
    _print_run(run, as_json)


class RetryableChoice(StrEnum):
    """The ended statuses a bulk retry may re-run."""

    FAILED = "failed"
    ORPHANED = "orphaned"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


OPERATION_POLL_S = 0.5


@runs_app.command("retry-many")
def runs_retry_many(
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    handler: Annotated[str | None, typer.Option(help="Only this handler.")] = None,
    status: Annotated[
        list[RetryableChoice] | None,
        typer.Option(help="Only these statuses (repeat it; default failed and orphaned)."),
    ] = None,
    error_code: Annotated[
        str | None, typer.Option(help="Only runs whose error.code is this.")
    ] = None,
    finished_after: Annotated[
        str | None, typer.Option(help="Only runs finished at or after this RFC 3339 time.")
    ] = None,
    finished_before: Annotated[
        str | None, typer.Option(help="Only runs finished before this RFC 3339 time.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Re-run at most this many.", min=1)] = None,
    checkpoint: Annotated[
        CheckpointChoice, typer.Option("--checkpoint", help="keep or drop, for every re-run.")
    ] = CheckpointChoice.KEEP,
    wait: Annotated[bool, typer.Option("--wait", help="Follow it until it is done.")] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Re-run every ended run the filters match, as a tracked operation (see `runs operation`)."""
    filters = {
        "queue": queue,
        "handler": handler,
        "status": [choice.value for choice in status] if status else None,
        "error_code": error_code,
        "finished_after": finished_after,
        "finished_before": finished_before,
        "limit": limit,
        "checkpoint": checkpoint.value,
    }
    with _api(api_url, api_key) as client:
        operation = client.retry_many(**filters)
        while wait and operation.status in ("running", "stalled"):
            if not as_json:
                typer.echo(_operation_line(operation))
            time.sleep(OPERATION_POLL_S)
            operation = client.operation(operation.id)
    typer.echo(operation.model_dump_json() if as_json else _operation_line(operation))


@runs_app.command("operation")
def runs_operation(
    operation_id: str,
    resume: Annotated[bool, typer.Option("--resume", help="Go on with a stalled one.")] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Stop it after its step.")] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Show a bulk retry's progress; --resume a stalled one, or --cancel it."""
    with _api(api_url, api_key) as client:
        if resume:
            operation = client.resume_operation(operation_id)
        elif cancel:
            operation = client.cancel_operation(operation_id)
        else:
            operation = client.operation(operation_id)
    typer.echo(operation.model_dump_json() if as_json else _operation_line(operation))


def _operation_line(operation: Any) -> str:
    return (
        f"operation {operation.id} {operation.status}: {operation.retried} re-run, "
        f"{operation.skipped} skipped, {operation.errors} errors of {operation.matched} matched "
        f"({operation.looked_at} looked at, limit {operation.limit})"
    )
