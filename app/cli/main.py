"""``leasehold``: start the parts (up, api, worker, reconciler) and talk to the API.

Flags override the environment (``LEASEHOLD_*``). An invalid setting prints one
line and exits with status 2. Output is for people by default; ``--json``
prints machine-readable JSON.

This module is the typer root: the parts' commands, ``submit`` and the health probes;
each group of commands is a module of its own (:mod:`app.cli.runs`,
:mod:`app.cli.queues`, :mod:`app.cli.schedules`, :mod:`app.cli.demo`), added here.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import EXIT_FAILED
from app.cli.api_calls import api_client as _api
from app.cli.api_calls import fail as _fail
from app.cli.api_calls import json_option as _json_option
from app.cli.api_calls import print_run as _print_run
from app.cli.builds import builds_app
from app.cli.demo import demo_app
from app.cli.keys import keys_app
from app.cli.namespaces import namespaces_app
from app.cli.options import ApiKey, ApiUrl, JsonFlag
from app.cli.preflight import (
    handlers_or_exit,
    refuse,
    runnable_handlers_or_exit,
    settings_or_exit,
    tracing_or_exit,
)
from app.cli.queues import queues_app
from app.cli.runs import _follow, runs_app
from app.cli.schedules import schedules_app
from app.errors import ConfigurationError, LeaseholdError
from app.startup import settle
from app.statuses import RunStatus
from app.telemetry.logs import configure_logging

# start-up is what `runs get` in a shell loop pays each time (BENCHMARKS.md): what only some
# commands need (asyncio, redis through the probes and handlers, pydantic-settings, httpx,
# rich) is imported inside those commands, not here
if TYPE_CHECKING:
    from app.cli.probes import ProbeResult
    from app.client import Client
    from app.models import Run
    from app.settings import Settings

# the widest help click lays out: the terminal's width up to this
HELP_WIDTH = 160

# plain click help (rich_markup_mode=None) on every group: typer's rich tables show each
# flag as `--retry <bool>`, and drawing them imports rich, a good part of start-up
app = typer.Typer(
    help="Leasehold: durable runs on Redis with fenced leases.",
    rich_markup_mode=None,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click wraps help at 80 columns whatever the terminal: the commands' one-line
    # descriptions were cut at ~45 characters even at 160 columns
    context_settings={"max_content_width": HELP_WIDTH},
)


def _print_version(asked: bool) -> None:
    if asked:
        from app import __version__

        typer.echo(f"leasehold {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Leasehold: durable runs on Redis with fenced leases."""


app.add_typer(runs_app, name="runs")
probe_app = typer.Typer(
    rich_markup_mode=None,
    help="Health probes for containers: exit 0 when healthy, 1 when not.",
    no_args_is_help=True,
)
app.add_typer(probe_app, name="probe")
app.add_typer(queues_app, name="queues")
app.add_typer(schedules_app, name="schedules")
app.add_typer(keys_app, name="keys")
app.add_typer(namespaces_app, name="namespaces")
app.add_typer(builds_app, name="builds")
app.add_typer(demo_app, name="demo")

WAIT_POLL_S = 0.2
AppDir = Annotated[
    Path | None,
    typer.Option(
        "--app-dir",
        help="Directory put first on sys.path before LEASEHOLD_HANDLERS is imported "
        "(default: LEASEHOLD_APP_DIR, else the current directory).",
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
    app_dir: AppDir = None,
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log/--no-access-log",
            help="Let the API log one line per request (off: the terminal is the children's).",
        ),
    ] = False,
) -> None:
    """Start everything: Redis (embedded unless LEASEHOLD_REDIS_URL is set), the API, workers.

    Handlers are imported from the app dir (the current directory by default) and
    LEASEHOLD_HANDLERS; STATE_DIR/stack.json tells other terminals' commands where it all is.
    """
    from app.stack.stack import Stack

    settings = settings_or_exit(api_port=port, app_dir=app_dir)
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
        Stack(settings, workers=workers, access_log=access_log).run()
    except LeaseholdError as exc:
        raise _fail(str(exc)) from None


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address.")] = None,
    port: Annotated[int | None, typer.Option(help="Port.")] = None,
    app_dir: AppDir = None,
) -> None:
    """Serve the HTTP API (uvicorn). Imports LEASEHOLD_HANDLERS from the app dir."""
    import uvicorn

    from app.api.app import create_app
    from app.api.server import uvicorn_options
    from app.cli.address import log_addresses, process_settings_or_exit

    settings, book = process_settings_or_exit(api_host=host, api_port=port, app_dir=app_dir)
    registry = handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    log_addresses(settings, book, api=f"http://{settings.api_host}:{settings.api_port}")
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
        access_log=settings.api_access_log,
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
    app_dir: AppDir = None,
) -> None:
    """Run an executor: claim runs, hold their leases, drain on SIGTERM.

    Runs the handlers of the modules LEASEHOLD_HANDLERS names (mypkg.handlers), imported
    from the app dir. Started where `leasehold up` runs, it joins that stack.
    """
    from app.imports import import_redis

    import_redis()  # first: before the worker's modules (or a handler's) import redis
    from app import event_loop
    from app.cli.address import log_addresses, process_settings_or_exit
    from app.executor.worker import Worker

    settings, book = process_settings_or_exit(
        queues=queues,
        concurrency=concurrency,
        lease_ttl_s=lease_ttl_s,
        reconciler_enabled=False if no_reconciler else None,
        app_dir=app_dir,
    )
    registry = runnable_handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    log_addresses(settings, book, api=settings.client_api_url)
    tracing_or_exit(settings, "leasehold-worker")
    # the worker settles the collector (app.startup) once it is connected
    event_loop.run(Worker(settings, registry).run(), settings.worker_event_loop)


@app.command()
def gate(
    upstream: Annotated[str, typer.Option(help="Base URL of the tool the gate protects.")],
    listen: Annotated[int, typer.Option(help="Port the gate listens on.", min=1, max=65535)],
    api: Annotated[
        str | None, typer.Option("--api", help="Leasehold API URL (default: the settings').")
    ] = None,
    audience: Annotated[
        str, typer.Option(help="The audience lease tokens must be made for.")
    ] = "leasehold-gate",
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    offline: Annotated[
        bool, typer.Option("--offline", help="Check signatures only, not the current fence.")
    ] = False,
    leeway_s: Annotated[
        float,
        typer.Option(
            "--leeway-s",
            min=0,
            help="Clock skew allowed on exp (this host vs Redis); the fence check still holds.",
        ),
    ] = 0.0,
) -> None:
    """Forward to --upstream only calls carrying a current lease token (ctx.lease_token)."""
    import uvicorn

    from app.cli.address import client_settings_or_exit
    from app.tokens.gate import gate_app
    from app.tokens.verify import LeaseVerifier

    settings = client_settings_or_exit(api)
    configure_logging(settings.log_level, settings.log_format)
    verifier = LeaseVerifier(
        audience=audience,
        api_url=api or settings.client_api_url,
        api_key=settings.api_key,
        online=not offline,
        leeway_s=leeway_s,
    )
    uvicorn.run(
        gate_app(upstream=upstream, verifier=verifier),
        host=host,
        port=listen,
        log_level=settings.log_level.lower(),
        log_config=None,
    )


@app.command()
def reconciler() -> None:
    """Run a standalone reconciler (one also runs inside every worker by default)."""
    import asyncio

    from app.cli.address import log_addresses, process_settings_or_exit
    from app.reconciler.reconciler import run_standalone

    settings, book = process_settings_or_exit()
    configure_logging(settings.log_level, settings.log_format)
    log_addresses(settings, book, api=None)
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
    payload = _json_option("--input", input)
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


@probe_app.command("api")
def probe_api(
    path: Annotated[str, typer.Option(help="Path to GET on this host's API.")] = "/readyz",
) -> None:
    """The API answers PATH with a 2xx (sends a configured key, if any)."""
    from app.cli.address import client_settings_or_exit
    from app.cli.probes import probe_api as check

    _report(check(client_settings_or_exit(), path))


@probe_app.command("redis")
def probe_redis() -> None:
    """Redis is reachable and the scripts are loaded."""
    from app.cli.address import process_settings_or_exit
    from app.cli.probes import probe_redis as check

    _report(check(process_settings_or_exit()[0]))


@probe_app.command("worker")
def probe_worker() -> None:
    """A worker on this host heartbeats (passes while Redis is unreachable)."""
    from app.cli.address import process_settings_or_exit
    from app.cli.probes import probe_worker as check

    _report(check(process_settings_or_exit()[0]))


def _report(result: ProbeResult) -> None:
    typer.echo(result.detail, err=not result.healthy)
    if not result.healthy:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    """Run the CLI; a setting found invalid late (inside a command) is one line and status 2."""
    try:
        app()
    except ConfigurationError as exc:
        refuse(str(exc))


if __name__ == "__main__":
    main()
