"""The CLI's side of a call to the API: a client whose failures are one line, a run printed.

What every command that talks to the API shares (:mod:`app.cli` holds the commands).
A failure ends the process as typer ends it for ``typer.Exit``: ``SystemExit`` with the
status (click passes ``SystemExit`` through unchanged), after one line on stderr.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import typer

from app.errors import ApiError
from app.namespaces import DEFAULT_NAMESPACE
from app.render import error_words
from app.statuses import RunStatus
from app.wait_kinds import blocked_on_words, deadline_ms, wait_words

if TYPE_CHECKING:
    from app.client import Client
    from app.models import Run

EXIT_FAILED = 1


def fail(message: str) -> SystemExit:
    """``leasehold: <message>`` on stderr; the exit (status 1) for the caller to raise."""
    typer.echo(f"leasehold: {message}", err=True)
    return SystemExit(EXIT_FAILED)


def json_option(flag: str, raw: str | None) -> Any:
    """An option's JSON text decoded (None stays None); not JSON is one line and exit 1."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise fail(f"{flag} is not JSON: {exc}") from None


@contextmanager
def api_client(api_url: str | None, api_key: str | None = None) -> Iterator[Client]:
    """A client for the API; an error answer or an unreachable API is one line and exit 1.

    The key is ``--api-key``, else ``LEASEHOLD_API_KEY``; a 401 says which to set. The
    namespace is LEASEHOLD_NAMESPACE's (none sent for ``default``: the key's own then).
    """
    # imported here, not at the top: httpx costs a command that never talks to the API
    # (`leasehold worker`, `up`) start-up time; without its own CLI (app.httpx_import)
    from app.cli.address import client_settings_or_exit
    from app.client import Client
    from app.httpx_import import httpx

    settings = client_settings_or_exit(api_url)
    url = api_url or settings.client_api_url
    try:
        namespace = settings.namespace if settings.namespace != DEFAULT_NAMESPACE else None
        with Client(url, api_key=api_key or settings.api_key, namespace=namespace) as client:
            yield client
    except ApiError as exc:
        raise fail(describe_problem(exc)) from None
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise fail(
            f"cannot reach the API at {_redacted(url)} ({reason}); is it running? "
            "(--api-url or LEASEHOLD_API_URL says where it is)"
        ) from None


def _redacted(url: str) -> str:
    from app.redaction import redacted

    return redacted(url)


def describe_problem(exc: ApiError) -> str:
    """The API's problem detail, plus which fields were wrong when it lists them."""
    errors = exc.problem.get("errors") or []
    fields = "; ".join(
        f"{'.'.join(str(part) for part in error.get('loc', []))}: {error.get('msg', '')}"
        for error in errors
        if isinstance(error, dict)
    )
    return f"{exc} ({fields})" if fields else str(exc)


def show_run(run_id: str, *, as_json: bool, api_url: str | None, api_key: str | None) -> None:
    """``leasehold runs get``: fetch one run and print it (JSON, or one field a line)."""
    with api_client(api_url, api_key) as client:
        run = client.get(run_id)
    print_run(run, as_json)


def print_run(run: Run, as_json: bool) -> None:
    """A run as ``runs get`` and the commands that change one show it."""
    if as_json:
        typer.echo(run.model_dump_json())
        return
    # an ended run's status says why it ended (``orphaned: executor lease expired``);
    # a run going on shows the error its last attempt left on its own line
    why = error_words(run.error.code, run.error.message) if run.error is not None else ""
    ended_why = f": {why}" if why and run.status.is_terminal else ""
    lines = [
        f"run       {run.id}",
        f"status    {run.status.value}{ended_why}",
        f"handler   {run.handler} (queue {run.queue})",
        f"attempt   {run.attempt}/{run.max_attempts}   fence {run.fence}",
    ]
    if run.owner_id:
        lines.append(f"owner     {run.owner_id}")
    if run.lease_expires_at:
        lines.append(f"lease     expires {run.lease_expires_at.isoformat()}")
    lines.extend(held_back_lines(run))
    if run.output is not None:
        lines.append(f"output    {json.dumps(run.output)}")
    if why and not ended_why:
        lines.append(f"error     {why}")
    if run.error is not None and run.error.details:
        lines.append(f"evidence  {json.dumps(run.error.details)}")
    if run.retry_of:
        lines.append(f"retry of  {run.retry_of}")
    if run.retried_by:
        lines.append(f"re-run as {run.retried_by}")
    lines.extend(unpark_lines(run))
    typer.echo("\n".join(lines))


def held_back_lines(run: Run) -> list[str]:
    """Why a run in its queue's lane does not start yet: its delayed start, or a limit."""
    lines = []
    if run.run_at and run.status == RunStatus.QUEUED:
        lines.append(f"starts    not before {run.run_at.isoformat()}")
    if run.blocked_on and run.status in (RunStatus.QUEUED, RunStatus.WAITING):
        lines.append(f"blocked   on {blocked_on_words(run.blocked_on)}")
    return lines


def unpark_lines(run: Run) -> list[str]:
    """What a parked run waits for and the command that moves it on; [] if not parked.

    The wait's words are the table of wait kinds' (:mod:`app.wait_kinds`), the ones
    ``runs watch`` and the console say; a person's question (``ctx.ask_human``) and a
    wait's deadline get lines of their own, the deadline with its date.
    """
    escalation = run.escalation or {}
    wait = run.waiting_for or {}
    if run.status == RunStatus.WAITING_HUMAN:
        question = ["question  " + json.dumps(escalation.get("question"), ensure_ascii=False)]
        asked = escalation.get("reason") == "ask_human"
        reason = escalation.get("reason") or "the watchdog escalated"
        waiting = wait_words(wait) if asked and wait else f"for a person: {reason}"
        return [
            *(question if asked else []),
            f"waiting   {waiting}",
            f"unpark    leasehold runs resume {run.id} --input JSON  (what you decided)",
        ]
    if run.status == RunStatus.WAITING and wait:
        lines = [f"waiting   {wait_words(wait)}"]
        deadline = deadline_ms(wait)
        if deadline is not None:
            lines.append(f"deadline  {datetime.fromtimestamp(deadline / 1000, tz=UTC).isoformat()}")
        if wait.get("kind") == "signal":
            name = wait.get("subject")
            lines.append(f"signal    leasehold runs signal {run.id} {name} --payload JSON")
        return lines
    if run.status == RunStatus.RECONCILIATION_REQUIRED:
        return [
            "waiting   for a person: an effect's outcome is unknown (did it happen?)",
            f"unpark    leasehold runs resolve {run.id} --action retry "
            "--effect-outcome applied|not_applied  (or --action fail, or --action succeed "
            "--output JSON)",
        ]
    return []
