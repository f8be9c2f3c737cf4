"""``leasehold``: start the parts (up, api, worker, reconciler) and talk to the API.

Flags override the environment (``LEASEHOLD_*``). An invalid setting prints one
line and exits with status 2. Output is for people by default; ``--json``
prints machine-readable JSON.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli_api import EXIT_FAILED, show_run
from app.cli_api import api_client as _api
from app.cli_api import fail as _fail
from app.cli_api import print_run as _print_run
from app.cli_api import unpark_lines as _unpark_lines
from app.errors import ConfigurationError, LeaseholdError
from app.preflight import (
    handlers_or_exit,
    refuse,
    runnable_handlers_or_exit,
    settings_or_exit,
    tracing_or_exit,
)
from app.render import error_words
from app.startup import settle
from app.statuses import PARKED_STATUSES, TERMINAL_EVENT_TYPES, RunStatus
from app.telemetry.logs import configure_logging

# start-up is what `runs get` in a shell loop pays each time (BENCHMARKS.md): what only some
# commands need (asyncio, redis through the probes and handlers, pydantic-settings, httpx,
# rich) is imported inside those commands, not here
if TYPE_CHECKING:
    from app.client import Client
    from app.models import Run
    from app.models.api import FireResult
    from app.models.read import RunPage, Schedule
    from app.probes import ProbeResult
    from app.settings import Settings

# plain click help (rich_markup_mode=None) on every group: typer's rich tables show each
# flag as `--retry <bool>`, and drawing them imports rich, a good part of start-up
app = typer.Typer(
    help="Leasehold: durable runs on Redis with fenced leases.",
    rich_markup_mode=None,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
runs_app = typer.Typer(
    rich_markup_mode=None,
    help="Inspect, cancel, resolve, retry, delete and purge runs.",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")
probe_app = typer.Typer(
    rich_markup_mode=None,
    help="Health probes for containers: exit 0 when healthy, 1 when not.",
    no_args_is_help=True,
)
app.add_typer(probe_app, name="probe")
queues_app = typer.Typer(
    rich_markup_mode=None, help="List and declare queues.", no_args_is_help=True
)
app.add_typer(queues_app, name="queues")
schedules_app = typer.Typer(
    rich_markup_mode=None,
    help="Cron and interval schedules: list, create, pause, trigger, backfill.",
    no_args_is_help=True,
)
app.add_typer(schedules_app, name="schedules")
demo_app = typer.Typer(
    rich_markup_mode=None, help="Scripted demonstrations on a private stack.", no_args_is_help=True
)
app.add_typer(demo_app, name="demo")

WAIT_POLL_S = 0.2

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
PageSize = Annotated[int, typer.Option("--limit", help="Page size.", min=1, max=500)]
PageCursor = Annotated[str | None, typer.Option("--cursor", help="Cursor from a previous page.")]
ApiUrl = Annotated[str | None, typer.Option("--api-url", help="API base URL.")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="Bearer key for an API with LEASEHOLD_API_KEYS set (default: LEASEHOLD_API_KEY).",
    ),
]


def with_demo(settings: Settings) -> Settings:
    """``settings`` whose LEASEHOLD_HANDLERS names the demo first (``leasehold up``)."""
    from app.settings import DEMO_HANDLERS

    if settings.demo_enabled:
        return settings
    return settings.model_copy(update={"handlers": [DEMO_HANDLERS, *settings.handlers]})


@app.command()
def up(
    workers: Annotated[int, typer.Option(help="Worker processes to start.", min=0)] = 2,
    port: Annotated[int | None, typer.Option(help="API port.")] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo/--no-demo",
            help="Add the demo handlers (app.demo) and its /demo/model route to "
            "LEASEHOLD_HANDLERS.",
        ),
    ] = True,
) -> None:
    """Start everything: Redis (embedded unless LEASEHOLD_REDIS_URL is set), the API, workers."""
    from app.stack.stack import Stack

    settings = settings_or_exit(api_port=port)
    if demo:
        settings = with_demo(settings)
    # fail here, before anything starts, not in every child
    if workers:
        runnable_handlers_or_exit(settings)
    else:
        handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    settle()
    try:
        Stack(settings, workers=workers).run()
    except LeaseholdError as exc:
        raise _fail(str(exc)) from None


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address.")] = None,
    port: Annotated[int | None, typer.Option(help="Port.")] = None,
) -> None:
    """Serve the HTTP API (uvicorn)."""
    import uvicorn

    from app.api.app import create_app
    from app.api.server import uvicorn_options

    settings = settings_or_exit(api_host=host, api_port=port)
    registry = handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    application = create_app(settings, registry)
    if settings.demo_enabled:
        # the demo's fake model, for demo.agent: mounted by what enables the demo
        from app.demo.model_server import install as install_demo

        install_demo(application)
    if len(registry) == 0:
        logging.getLogger(__name__).warning(
            "no handlers (LEASEHOLD_HANDLERS is empty): every POST /runs gets 422"
        )
    tracing_or_exit(settings, "leasehold-api")
    settle()
    uvicorn.run(
        application,
        host=settings.api_host,
        port=settings.api_port,
        log_level=settings.log_level.lower(),
        # None: uvicorn keeps its hands off logging, so its lines use LEASEHOLD_LOG_FORMAT too
        log_config=None,
        timeout_graceful_shutdown=5,
        **uvicorn_options(settings),  # connection limit, keep-alive and header timeouts
    )


@app.command()
def worker(
    queues: Annotated[str | None, typer.Option(help="Comma-separated queues.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Runs at once.")] = None,
    lease_ttl_s: Annotated[float | None, typer.Option(help="Lease TTL in seconds.")] = None,
    no_reconciler: Annotated[
        bool, typer.Option("--no-reconciler", help="Do not run a reconciler inside.")
    ] = False,
) -> None:
    """Run an executor: claim runs, hold their leases, drain on SIGTERM."""
    from app.imports import import_redis

    import_redis()  # first: before the worker's modules (or a handler's) import redis
    from app import event_loop
    from app.executor.worker import Worker

    settings = settings_or_exit(
        queues=queues,
        concurrency=concurrency,
        lease_ttl_s=lease_ttl_s,
        reconciler_enabled=False if no_reconciler else None,
    )
    registry = runnable_handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    tracing_or_exit(settings, "leasehold-worker")
    # the worker settles the collector (app.startup) once it is connected
    event_loop.run(Worker(settings, registry).run(), settings.worker_event_loop)


@app.command()
def reconciler() -> None:
    """Run a standalone reconciler (one also runs inside every worker by default)."""
    import asyncio

    from app.reconciler.reconciler import run_standalone

    settings = settings_or_exit()
    configure_logging(settings.log_level, settings.log_format)
    settle()
    asyncio.run(run_standalone(settings))


@app.command()
def submit(
    handler: Annotated[str, typer.Argument(help="Handler name, e.g. demo.sleep.")],
    input: Annotated[str, typer.Option("--input", help="Input as JSON.")] = "{}",
    queue: Annotated[str | None, typer.Option(help="Queue.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Attempts in all.")] = None,
    on_lease_expired: Annotated[str | None, typer.Option(help="orphan or retry.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    retention_s: Annotated[
        float | None, typer.Option(help="Keep it this long once it ends (seconds).")
    ] = None,
    queued_ttl_s: Annotated[
        float | None, typer.Option(help="Expire it if unclaimed this long (seconds).")
    ] = None,
    run_at: Annotated[
        str | None,
        typer.Option("--run-at", help="Start no earlier than this RFC 3339 time."),
    ] = None,
    delay_s: Annotated[
        float | None, typer.Option("--delay-s", help="Start no earlier than this many seconds.")
    ] = None,
    concurrency_key: Annotated[
        str | None, typer.Option("--concurrency-key", help="Key whose limit it counts against.")
    ] = None,
    priority: Annotated[
        int | None, typer.Option("--priority", help="-100..100, higher first.")
    ] = None,
    singleton_key: Annotated[
        str | None, typer.Option("--singleton-key", help="At most one run of it at a time.")
    ] = None,
    on_conflict: Annotated[
        str | None,
        typer.Option("--on-conflict", help="reject, enqueue, cancel_active or replace_queued."),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the run ends.")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", help="Stream its events until it ends.")
    ] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Create a run and print it (--wait: once it has ended; --follow: stream its events).

    --run-at / --delay-s delay its start: it stays queued, with a `wait` event, until then.
    """
    try:
        payload = json.loads(input)
    except json.JSONDecodeError as exc:
        raise _fail(f"--input is not JSON: {exc}") from None
    with _api(api_url, api_key) as client:
        run = client.create(
            handler,
            payload,
            queue=queue,
            max_attempts=max_attempts,
            on_lease_expired=on_lease_expired,
            idempotency_key=idempotency_key,
            retention_s=retention_s,
            queued_ttl_s=queued_ttl_s,
            run_at=run_at,
            delay_s=delay_s,
            concurrency_key=concurrency_key,
            priority=priority,
            singleton_key=singleton_key,
            on_conflict=on_conflict,
        )
        if follow:
            if not as_json:
                typer.echo(f"following {run.id}")
            code = _follow(client, run.id, as_json)
        elif wait:
            run = _wait_until_ended(client, run.id)
    if follow:
        raise typer.Exit(code)
    _print_run(run, as_json)
    if wait and run.status != RunStatus.SUCCEEDED:
        raise typer.Exit(EXIT_FAILED)


def _wait_until_ended(client: Client, run_id: str) -> Run:
    while True:
        run = client.get(run_id)
        if run.status.is_terminal or run.status.is_parked:
            return run
        time.sleep(WAIT_POLL_S)


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
    try:
        payload = json.loads(input)
    except json.JSONDecodeError as exc:
        raise _fail(f"--input is not JSON: {exc}") from None
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
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise _fail(f"--payload is not JSON: {exc}") from None
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


def _json_option(flag: str, raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(f"{flag} is not JSON: {exc}") from None


@probe_app.command("api")
def probe_api(
    path: Annotated[str, typer.Option(help="Path to GET on this host's API.")] = "/readyz",
) -> None:
    """The API answers PATH with a 2xx (sends a configured key, if any)."""
    from app.probes import probe_api as check

    _report(check(settings_or_exit(), path))


@probe_app.command("redis")
def probe_redis() -> None:
    """Redis is reachable and the scripts are loaded."""
    from app.probes import probe_redis as check

    _report(check(settings_or_exit()))


@probe_app.command("worker")
def probe_worker() -> None:
    """A worker on this host heartbeats (passes while Redis is unreachable)."""
    from app.probes import probe_worker as check

    _report(check(settings_or_exit()))


def _report(result: ProbeResult) -> None:
    typer.echo(result.detail, err=not result.healthy)
    if not result.healthy:
        raise typer.Exit(EXIT_FAILED)


@queues_app.command("list")
def queues_list(as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Every declared queue: ready, running, delayed, parked, oldest queued age, memory."""
    with _api(api_url, api_key) as client:
        page = client.queues()
    if as_json:
        typer.echo(page.model_dump_json())
        return
    typer.echo(
        f"{'queue':<24} {'ready':>7} {'running':>7} {'delayed':>7} {'parked':>7} "
        f"{'oldest s':>9} {'memory':>10}"
    )
    for queue in page.items:
        typer.echo(
            f"{queue.name:<24} {queue.ready:>7} {queue.running:>7} {queue.delayed:>7} "
            f"{queue.parked:>7} {queue.oldest_queued_age_s:>9.1f} {queue.memory_bytes:>10}"
        )


@queues_app.command("declare")
def queues_declare(
    name: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """Declare a queue so runs may be created on it (idempotent)."""
    with _api(api_url, api_key) as client:
        queue = client.declare_queue(name)
    typer.echo(queue.model_dump_json() if as_json else f"declared {queue.name}")


@queues_app.command("undeclare")
def queues_undeclare(name: str, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Undeclare an empty queue, freeing a LEASEHOLD_MAX_QUEUES slot."""
    with _api(api_url, api_key) as client:
        client.undeclare_queue(name)
    typer.echo(f"undeclared {name}")


@queues_app.command("limits")
def queues_limits(
    name: str,
    queue: Annotated[int | None, typer.Option("--queue", help="Running runs of the queue.")] = None,
    handler: Annotated[
        list[str] | None, typer.Option("--handler", help="HANDLER=N, repeatable.")
    ] = None,
    default_key: Annotated[
        int | None, typer.Option("--default-key", help="Running runs of any other key.")
    ] = None,
    key: Annotated[list[str] | None, typer.Option("--key", help="KEY=N, repeatable.")] = None,
    show: Annotated[bool, typer.Option("--show", help="Print them; change nothing.")] = False,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Set a queue's concurrency limits across all workers (replaced whole), or --show them."""
    from app.models.read import QueueLimits

    with _api(api_url, api_key) as client:
        if show:
            limits = client.limits(name)
        else:
            wanted = QueueLimits(
                queue=queue,
                handlers=_pairs(handler or [], "--handler"),
                default_key=default_key,
                keys=_pairs(key or [], "--key"),
            )
            limits = client.set_limits(name, wanted)
    typer.echo(limits.model_dump_json(indent=None if as_json else 2))


def _pairs(items: list[str], option: str) -> dict[str, int]:
    """NAME=N options as a dict; exits 2 on one that is not."""
    pairs: dict[str, int] = {}
    for item in items:
        name, sep, number = item.rpartition("=")
        if not sep or not name or not number.isdigit():
            typer.echo(f"{option} takes NAME=N, not {item!r}", err=True)
            raise typer.Exit(2)
        pairs[name] = int(number)
    return pairs


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
    typer.echo(f"{'schedule':<28} {'spec':<24} {'overlap':<16} {'next fire':<26} fired")
    for item in page.items:
        spec = f"cron {item.cron}" if item.cron else f"every {item.interval_s:g}s"
        upcoming = (
            "paused"
            if item.paused
            else (item.next_fire_at.isoformat() if item.next_fire_at else "-")
        )
        typer.echo(
            f"{item.id:<28} {spec[:24]:<24} {item.overlap:<16} {upcoming:<26} {item.fired_count}"
        )
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


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
    try:
        payload = json.loads(input)
    except json.JSONDecodeError as exc:
        raise _fail(f"--input is not JSON: {exc}") from None
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


DEMO_MAX_SECONDS = 300.0


def _demo_seconds(value: float) -> float:
    """A demo's lease length: finite, above 0, at most DEMO_MAX_SECONDS (else exit 2)."""
    if not (math.isfinite(value) and 0 < value <= DEMO_MAX_SECONDS):
        raise typer.BadParameter(
            f"must be a number of seconds above 0, at most {DEMO_MAX_SECONDS:g}"
        )
    return value


@demo_app.command("kill-worker")
def demo_kill_worker(
    retry: Annotated[
        bool, typer.Option("--retry", help="on_lease_expired=retry: another worker takes over.")
    ] = False,
    lease_ttl_s: Annotated[
        float, typer.Option(help="Lease TTL of the demo stack.", callback=_demo_seconds)
    ] = 3.0,
) -> None:
    """Start a private stack, post a long run, kill -9 its worker, watch what happens."""
    from app.demo.walkthrough import kill_worker

    _story_ended(lambda: kill_worker(retry=retry, ttl_s=lease_ttl_s, out=sys.stdout))


@demo_app.command("escalate")
def demo_escalate(
    op_lease_s: Annotated[
        float,
        typer.Option(
            help="Lease of the approval wait; the watchdog is asked after it.",
            callback=_demo_seconds,
        ),
    ] = 1.0,
) -> None:
    """Start a private stack, let the watchdog escalate a silent approval, resume it."""
    from app.demo.walkthrough import escalate

    _story_ended(lambda: escalate(op_lease_s=op_lease_s, out=sys.stdout))


@demo_app.command("effect-unknown")
def demo_effect_unknown(
    lease_ttl_s: Annotated[
        float, typer.Option(help="Lease TTL of the demo stack.", callback=_demo_seconds)
    ] = 3.0,
) -> None:
    """Start a private stack, kill -9 a worker mid-payment, resolve the unknown effect."""
    from app.demo.walkthrough import effect_unknown

    _story_ended(lambda: effect_unknown(ttl_s=lease_ttl_s, out=sys.stdout))


@demo_app.command("rerun")
def demo_rerun() -> None:
    """Start a private stack, fail an order after its charge, re-run it: charged once."""
    from app.demo.walkthrough import rerun

    _story_ended(lambda: rerun(out=sys.stdout))


def _story_ended(story: Callable[[], Run]) -> None:
    """Run a demo story and print how its run ended, or exit 1 with what went wrong."""
    from app.httpx_import import httpx

    try:
        run = story()
    except LeaseholdError as exc:  # the story went wrong (WalkthroughFailed), or the API said no
        raise _fail(str(exc)) from None
    except httpx.TransportError as exc:
        raise _fail(f"the demo's API went away: {exc}") from None
    # the status alone when there is no error: "ended succeeded: succeeded" said it twice
    why = f": {error_words(run.error.code, run.error.message)}" if run.error else ""
    typer.echo(f"{run.id} ended {run.status.value}{why} (attempt {run.attempt}, fence {run.fence})")


def main() -> None:
    """Run the CLI; a setting found invalid late (inside a command) is one line and status 2."""
    try:
        app()
    except ConfigurationError as exc:
        refuse(str(exc))


if __name__ == "__main__":
    main()
