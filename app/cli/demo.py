"""``leasehold demo ...``: the scripted demonstrations (:mod:`app.demo.walkthrough`,
:mod:`app.demo.tenants`).

Each story runs on a private stack of its own.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.api_calls import fail as _fail
from app.errors import LeaseholdError
from app.render import error_words

if TYPE_CHECKING:
    from app.models import Run

demo_app = typer.Typer(
    rich_markup_mode=None, help="Scripted demonstrations on a private stack.", no_args_is_help=True
)


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


@demo_app.command("tenants")
def demo_tenants() -> None:
    """Start a private stack, two tenants: each sees only its own runs; one hits its quota."""
    from app.demo.tenants import tenants

    _story_ended(lambda: tenants(out=sys.stdout))


@demo_app.command("deploy")
def demo_deploy() -> None:
    """Start a private stack, deploy v2 beside v1: pinned runs stay, drift parks, v1 drains."""
    from app.demo.deploy import deploy

    _story_ended(lambda: deploy(out=sys.stdout))


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
