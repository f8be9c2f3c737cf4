"""The CLI's side of a call to the API, without typer: a client, one-line failures, a run.

``leasehold runs get ID`` runs in shell loops, so its start-up is paid per call (issue
19: <= 300 ms), and ``import typer`` alone is ~35 ms of CPU on a quiet core (typer's
package imports its whole command machinery, and its vendored click with it), the CLI's
module of 38 commands more. So what ``runs get`` needs lives here, importing neither:
the typer CLI (:mod:`app.cli`) uses the same functions for every command that talks to
the API, and :mod:`app.runs_get_command` calls :func:`show_run` directly.

A failure ends the process as typer ends it for ``typer.Exit``: ``SystemExit`` with the
status (click passes ``SystemExit`` through unchanged), after one line on stderr.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.environment import client_settings
from app.errors import ApiError, ConfigurationError
from app.http_get import Unreachable
from app.preflight import EXIT_CONFIG, settings_or_exit
from app.render import error_words
from app.statuses import RunStatus

if TYPE_CHECKING:
    from app.client import Client
    from app.models import Run
    from app.run_record import RunRecord

EXIT_FAILED = 1
# what click's echo strips from output that is not a terminal (click's _compat._ansi_re)
_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")


def echo(message: str, *, err: bool = False) -> None:
    """Print a line as ``typer.echo`` does (flushed; ANSI codes stripped off a terminal).

    Its own, not typer's: ``typer.echo`` costs the ``typer`` import to every ``runs get``.
    """
    stream = sys.stderr if err else sys.stdout
    text = message + "\n"
    if not _is_terminal(stream):
        text = _ANSI.sub("", text)
    stream.write(text)
    stream.flush()


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` is an interactive terminal; a stream that cannot say is not."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except Exception:  # click's isatty: a stream that cannot answer is not a terminal
        return False


def fail(message: str) -> SystemExit:
    """``leasehold: <message>`` on stderr; the exit (status 1) for the caller to raise."""
    echo(f"leasehold: {message}", err=True)
    return SystemExit(EXIT_FAILED)


@contextmanager
def api_client(api_url: str | None, api_key: str | None = None) -> Iterator[Client]:
    """A client for the API; an error answer or an unreachable API is one line and exit 1.

    The key is ``--api-key``, else ``LEASEHOLD_API_KEY``; a 401 says which to set.
    """
    # imported here, not at the top: httpx costs a command that never talks to the API
    # (`leasehold worker`, `up`) start-up time; without its own CLI (app.httpx_import)
    from app.client import Client
    from app.httpx_import import httpx

    settings = settings_or_exit()
    url = api_url or settings.client_api_url
    try:
        with Client(url, api_key=api_key or settings.api_key) as client:
            yield client
    except ApiError as exc:
        raise fail(describe_problem(exc)) from None
    except httpx.TransportError as exc:
        raise fail(unreachable(url, str(exc) or type(exc).__name__)) from None


def unreachable(url: str, reason: str) -> str:
    """The line for an API that could not be reached (or stopped answering)."""
    return (
        f"cannot reach the API at {url} ({reason}); is it running? "
        "(--api-url or LEASEHOLD_API_URL says where it is)"
    )


class _RunReader:
    """``GET /runs/{id}`` without httpx or pydantic where the answer allows, else with them.

    The GET goes over a plain socket (:mod:`app.http_get`) and the run is read by
    :mod:`app.run_record`; whatever either does not promise to handle as httpx and
    pydantic would is handed to :class:`app.client.Client` (the GET sent again: it
    changes nothing) or to ``Run.model_validate``, whose answer is then the one shown.
    """

    def __init__(self, url: str, key: str | None, flags: tuple[str | None, str | None]) -> None:
        self._url = url
        self._key = key
        self._flags = flags

    def get(self, run_id: str) -> Run | RunRecord:
        """The run; raises ApiError for an error status, Unreachable for a transport failure."""
        import json

        from app import http_get
        from app.run_record import decode

        answer = http_get.get(self._url, f"/runs/{run_id}", self._key)
        if answer is not None and answer.status >= 400:
            try:
                problem = json.loads(answer.body)
            except ValueError:
                problem = None  # httpx reads a title from the text: let it
            if problem is not None:
                raise ApiError(answer.status, problem if isinstance(problem, dict) else {})
        elif answer is not None and answer.status == 200 and answer.body:
            try:
                body = json.loads(answer.body)
            except ValueError:
                body = None  # httpx raises the same error: let it
            if body is not None:
                return decode(body) or _validated(body)
        with api_client(*self._flags) as client:
            return client.get(run_id)


def _validated(body: object) -> Run:
    """pydantic's reading of an answer :mod:`app.run_record` does not promise to read."""
    from app.models import Run

    return Run.model_validate(body)


@contextmanager
def run_reader(api_url: str | None, api_key: str | None = None) -> Iterator[_RunReader | Client]:
    """:func:`api_client` for reading one run, without httpx and pydantic where it can.

    Light only when no ``LEASEHOLD_*`` setting but the API's URL and key is set
    (:func:`app.environment.client_settings`): any other is validated first, as before.
    """
    light = client_settings()
    if light is None:
        with api_client(api_url, api_key) as client:
            yield client
        return
    url = api_url or light[0]
    try:
        yield _RunReader(url, api_key or light[1], (api_url, api_key))
    except ApiError as exc:
        raise fail(describe_problem(exc)) from None
    except Unreachable as exc:
        raise fail(unreachable(url, str(exc))) from None


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
    with run_reader(api_url, api_key) as reader:
        run = reader.get(run_id)
    print_run(run, as_json)


def print_run(run: Run | RunRecord, as_json: bool) -> None:
    """A run as ``runs get`` and the commands that change one show it."""
    if as_json:
        echo(run.model_dump_json())
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
    if run.run_at and run.status == RunStatus.QUEUED:
        lines.append(f"starts    not before {run.run_at.isoformat()}")
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
    echo("\n".join(lines))


def unpark_lines(run: Run | RunRecord) -> list[str]:
    """What a parked run waits for and the command that moves it on; [] if not parked."""
    if run.status == RunStatus.WAITING_HUMAN:
        reason = (run.escalation or {}).get("reason") or "the watchdog escalated"
        return [
            f"waiting   for a person: {reason}",
            f"unpark    leasehold runs resume {run.id} --input JSON  (what you decided)",
        ]
    wait = run.waiting_for or {}
    if run.status == RunStatus.WAITING and wait.get("kind") == "sleep":
        until = datetime.fromtimestamp(wait.get("until_ms", 0) / 1000, tz=UTC)
        return [f"waiting   asleep until {until.isoformat()} (no lease held)"]
    if run.status == RunStatus.WAITING and wait.get("kind") == "signal":
        name = wait.get("subject")
        return [
            f"waiting   for signal {name} (no lease held)",
            f"signal    leasehold runs signal {run.id} {name} --payload JSON",
        ]
    if run.status == RunStatus.RECONCILIATION_REQUIRED:
        return [
            "waiting   for a person: an effect's outcome is unknown (did it happen?)",
            f"unpark    leasehold runs resolve {run.id} --action retry "
            "--effect-outcome applied|not_applied  (or --action fail, or --action succeed "
            "--output JSON)",
        ]
    return []


def guarded(command: Callable[[], object]) -> None:
    """Run ``command`` as the console script does: a setting found invalid late is one
    line and status 2, not a traceback (the typer CLI's path and ``runs get``'s)."""
    try:
        command()
    except ConfigurationError as exc:
        echo(f"leasehold: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
