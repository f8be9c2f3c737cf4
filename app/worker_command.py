"""``leasehold worker``: start an executor, with or without the typer CLI in front of it.

A worker's start-up is time before its first claim (issue 19: spawn -> first claim
<= 250 ms), and typer with its click costs ~25-30 ms of it to parse four flags. So
the console script (:mod:`app.launch`) hands ``leasehold worker ...`` straight to
:func:`run_worker` when :func:`parse_worker_args` understands every word of it, and
to the typer CLI otherwise: ``--help``, a flag it does not know, a value it would
have to guess about (``--concurrency x``, ``--queues=-a``) all get typer's own help
and error messages, exactly as before. Both paths start the same :func:`run_worker`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.cli_words import EXIT_INTERRUPTED, take_value_flag
from app.errors import ConfigurationError
from app.preflight import refuse, runnable_handlers_or_exit, settings_or_exit, tracing_or_exit

# numbers click would convert to exactly what int()/float() give; anything else ("1_0",
# " 5", "-1", "inf", "x") is left to click, so its answer (or its refusal) is the one given
_PLAIN_INT = re.compile(r"[0-9]+")
_PLAIN_FLOAT = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")
_VALUE_OPTIONS = {
    "--queues": "queues",
    "--concurrency": "concurrency",
    "--lease-ttl-s": "lease_ttl_s",
}


@dataclass(frozen=True)
class WorkerFlags:
    """``leasehold worker``'s flags; ``None`` leaves the LEASEHOLD_* setting as it is."""

    queues: str | None = None
    concurrency: int | None = None
    lease_ttl_s: float | None = None
    no_reconciler: bool = False


def parse_worker_args(args: list[str]) -> WorkerFlags | None:
    """The flags in ``args``, or ``None``: typer must answer them.

    ``args`` is what follows ``worker``. Understood: ``--queues Q``, ``--concurrency N``,
    ``--lease-ttl-s S`` (each also as ``--flag=value``, each at most once) and
    ``--no-reconciler``. ``None`` for anything else, so typer, which owns the command's
    definition, answers it (help, usage errors) word for word as it always has.
    """
    given: dict[str, str] = {}
    no_reconciler = False
    words = iter(args)
    for word in words:
        if word == "--no-reconciler" and not no_reconciler:
            no_reconciler = True
            continue
        if not take_value_flag(word, words, _VALUE_OPTIONS, given):
            return None
    return _converted(given, no_reconciler=no_reconciler)


def _converted(given: dict[str, str], *, no_reconciler: bool) -> WorkerFlags | None:
    """Each value as typer would pass it, or ``None`` where typer must judge it."""
    concurrency = given.get("concurrency")
    lease_ttl_s = given.get("lease_ttl_s")
    if concurrency is not None and not _PLAIN_INT.fullmatch(concurrency):
        return None
    if lease_ttl_s is not None and not _PLAIN_FLOAT.fullmatch(lease_ttl_s):
        return None
    return WorkerFlags(
        queues=given.get("queues"),
        concurrency=None if concurrency is None else int(concurrency),
        lease_ttl_s=None if lease_ttl_s is None else float(lease_ttl_s),
        no_reconciler=no_reconciler,
    )


def run_worker(flags: WorkerFlags) -> None:
    """Serve as an executor until SIGTERM/SIGINT; flags override LEASEHOLD_* (exit 2 if bad)."""
    from app.imports import import_redis
    from app.logs import configure_logging  # here: `runs get` imports this module's parser

    import_redis()  # first: before the worker's modules (or a handler's) import redis
    from app import event_loop
    from app.executor.worker import Worker

    settings = settings_or_exit(
        queues=flags.queues,
        concurrency=flags.concurrency,
        lease_ttl_s=flags.lease_ttl_s,
        reconciler_enabled=False if flags.no_reconciler else None,
    )
    registry = runnable_handlers_or_exit(settings)
    configure_logging(settings.log_level, settings.log_format)
    tracing_or_exit(settings, "leasehold-worker")
    event_loop.run(Worker(settings, registry).run(), settings.worker_event_loop)


def main(args: list[str]) -> bool:
    """Run ``leasehold worker <args>`` without typer if possible; ``False``: typer must.

    Ends as the typer path does: a setting found invalid late is one line and status 2
    (:func:`app.cli.main`), a Ctrl-C before the worker's own signal handlers are in
    place is typer's quiet status 130, not a traceback.
    """
    flags = parse_worker_args(args)
    if flags is None:
        return False
    try:
        run_worker(flags)
    except ConfigurationError as exc:
        refuse(str(exc))
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None
    return True
