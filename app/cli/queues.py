"""``leasehold queues ...``: list and declare queues, and set their concurrency limits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import api_client as _api
from app.cli.options import ApiKey, ApiUrl, JsonFlag

if TYPE_CHECKING:
    from app.models.read import QueueLimits

queues_app = typer.Typer(
    rich_markup_mode=None, help="List and declare queues.", no_args_is_help=True
)


@queues_app.command("list")
def queues_list(as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Every declared queue: ready, running, delayed, waiting, parked, oldest age, memory."""
    with _api(api_url, api_key) as client:
        page = client.queues()
    if as_json:
        typer.echo(page.model_dump_json())
        return
    typer.echo(
        f"{'queue':<24} {'ready':>7} {'running':>7} {'delayed':>7} {'waiting':>7} {'parked':>7} "
        f"{'oldest s':>9} {'memory':>10}"
    )
    for queue in page.items:
        typer.echo(
            f"{queue.name:<24} {queue.ready:>7} {queue.running:>7} {queue.delayed:>7} "
            f"{queue.waiting:>7} {queue.parked:>7} {queue.oldest_queued_age_s:>9.1f} "
            f"{queue.memory_bytes:>10}"
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
    if as_json:
        typer.echo(limits.model_dump_json())
        return
    typer.echo(limits_line(name, limits))


def limits_line(name: str, limits: QueueLimits) -> str:
    """A queue's limits as a person reads them: ``default: queue 10, handler demo.sleep 2,
    any key 3, key acme 5`` (``no limits`` when none is set)."""
    parts = [] if limits.queue is None else [f"queue {limits.queue}"]
    parts += [f"handler {handler} {n}" for handler, n in sorted(limits.handlers.items())]
    if limits.default_key is not None:
        parts.append(f"any key {limits.default_key}")
    parts += [f"key {key} {n}" for key, n in sorted(limits.keys.items())]
    return f"{name}: {', '.join(parts) if parts else 'no limits'}"


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
