"""``leasehold builds ...``: which builds run, what each still holds, when the old one can
be stopped (``wait-drained``, for deploy scripts), and moving pinned runs on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import api_client as _api
from app.cli.api_calls import fail
from app.cli.options import ApiKey, ApiUrl, JsonFlag

# the CLI's start-up imports no pydantic (tests/test_startup.py): models only for types
if TYPE_CHECKING:
    from app.models.builds import BuildInfo

builds_app = typer.Typer(
    rich_markup_mode=None,
    help="Builds (the code workers run): what each holds, wait for one to drain, upgrade.",
    no_args_is_help=True,
)


def _line(build: BuildInfo) -> str:
    pinned = build.pinned
    approx = "~" if pinned.estimated else ""
    state = "drained" if build.drained else "in use"
    unavailable = f", {build.unavailable} unavailable" if build.unavailable else ""
    return (
        f"{build.build_id:<24} {state:<8} workers={len(build.workers)} "
        f"running_now={build.running_now} pinned: {approx}queued={pinned.queued} "
        f"{approx}running={pinned.running} {approx}parked={pinned.parked}{unavailable}"
    )


@builds_app.command("list")
def builds_list(as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None) -> None:
    """Every build a live worker runs or an open run is pinned to."""
    with _api(api_url, api_key) as client:
        builds = client.builds()
    for build in builds:
        typer.echo(build.model_dump_json() if as_json else _line(build))


@builds_app.command("show")
def builds_show(
    build_id: str, as_json: JsonFlag = False, api_url: ApiUrl = None, api_key: ApiKey = None
) -> None:
    """One build: its workers and the runs pinned to it."""
    with _api(api_url, api_key) as client:
        build = client.build(build_id)
    typer.echo(build.model_dump_json() if as_json else _line(build))


@builds_app.command("wait-drained")
def builds_wait_drained(
    build_id: str,
    timeout: Annotated[
        float, typer.Option(min=0, help="Seconds to wait at most; then exit 1.")
    ] = 3600.0,
    every: Annotated[float, typer.Option(min=0.1, help="Seconds between two looks.")] = 2.0,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Wait until no open run is pinned to the build (its workers can then be stopped);
    exit 1 at --timeout, naming what it still holds."""
    deadline = time.monotonic() + timeout
    with _api(api_url, api_key) as client:
        while True:
            build = client.build(build_id)
            if build.drained:
                typer.echo(f"{build_id}: drained")
                return
            if time.monotonic() >= deadline:
                raise fail(f"{build_id}: not drained after {timeout:g}s: {_line(build)}")
            time.sleep(every)


@builds_app.command("upgrade")
def builds_upgrade(
    build_id: str,
    to: Annotated[
        str | None, typer.Option("--to", help="Pin them to this build (default: to none).")
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue's runs.")] = None,
    handler: Annotated[str | None, typer.Option(help="Only this handler's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most runs moved.")] = 1000,
    as_json: JsonFlag = False,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Move the runs pinned to a build to another build, or to none."""
    with _api(api_url, api_key) as client:
        summary = client.upgrade_build(
            build_id, to_build_id=to, queue=queue, handler=handler, limit=limit
        )
    if as_json:
        typer.echo(summary.model_dump_json())
        return
    typer.echo(f"{build_id}: upgraded {summary.upgraded}, {summary.remaining} still pinned")
