"""``leasehold demo deploy``: a rolling deploy with runs in flight, on a private stack.

The README's "Deploys" and "When the code changes under a run", played with the
handlers of :mod:`app.demo.checkout`, whose release v2 sends the receipt before the
charge:

1. two workers of build v1; orders parked on ``shipped`` (one pinned, one pinned that
   will be forced onto v2, one guarded by ``ctx.patched``) and a pinned sleep running;
2. two workers of build v2 start beside them; the pinned order resumes on v1;
3. the second pinned order is forced onto v2 (``POST /runs/{id}/upgrade``): v2 asks for
   the receipt where it recorded the charge, and the run parks ``version_drift``,
   visibly, having replayed and called nothing;
4. nothing is pinned to v1 any more: ``GET /builds`` says drained, and v1's workers stop;
5. the patched order, begun on v1, finishes on v2 the old way, and a new one the new way.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, TextIO

from app.client import Client
from app.demo.checkout import RELEASE_ENV
from app.demo.walkthrough import StackWorkers, WalkthroughFailed, stack, until
from app.models import Run, RunStatus

TTL_S = 3.0
V1 = {"LEASEHOLD_BUILD_ID": "v1", RELEASE_ENV: "v1", "LEASEHOLD_DRAIN_TIMEOUT_S": "5"}
V2 = {"LEASEHOLD_BUILD_ID": "v2", RELEASE_ENV: "v2"}
SLEEP_S = 2.0

Say = Callable[[str], object]


def deploy(*, out: TextIO) -> Run:
    """The deploy story; returns the drifted run as a person left it. Raises WalkthroughFailed."""
    with stack(TTL_S, worker_envs=[V1, V1]) as (url, workers), Client(url) as client:
        say = out.write
        until(lambda: len(client.workers()) == 2, "the API and two v1 workers")
        old = dict(workers)
        say(f"stack up: API {url}, workers {sorted(old)} of build v1\n")
        orders = _park_orders(client, say)
        for _ in range(2):
            workers.start(V2)
        until(lambda: len(client.workers()) == 4, "two v2 workers")
        say("two workers of build v2 started beside them\n")
        _pinned_stays_on_v1(client, orders["pinned"], say)
        drifted = _forced_onto_v2(client, orders["forced"], say)
        _v1_drained(client, workers, old, say)
        _patched_takes_both_paths(client, orders["patched"], say)
        return drifted


def _park_orders(client: Client, say: Say) -> dict[str, str]:
    """The runs in flight on v1: three orders parked on ``shipped``, a pinned sleep running."""
    runs = {
        "pinned": client.create("demo.checkout", {"order": "A"}, versioning="pinned").id,
        "forced": client.create("demo.checkout", {"order": "B"}, versioning="pinned").id,
        "patched": client.create("demo.checkout_patched", {"order": "C"}).id,
    }
    sleeping = client.create("demo.sleep", {"seconds": SLEEP_S}, versioning="pinned").id
    for run_id in runs.values():
        _until_status(client, run_id, RunStatus.WAITING)
    say(
        "on v1: orders A and B (pinned) and C (ctx.patched) charged and parked on 'shipped'; "
        f"a pinned {SLEEP_S:g}s sleep running\n"
    )
    _until_status(client, sleeping, RunStatus.SUCCEEDED)
    return runs


def _pinned_stays_on_v1(client: Client, run_id: str, say: Say) -> None:
    client.signal(run_id, "shipped", "parcel-A")
    done = _until_status(client, run_id, RunStatus.SUCCEEDED)
    if done.build_id != "v1":
        raise WalkthroughFailed(f"pinned order A ran on {done.build_id}, not v1")
    say(f"order A shipped: resumed on its build v1 while v2 runs beside it: {done.output}\n")


def _forced_onto_v2(client: Client, run_id: str, say: Say) -> Run:
    moved = client.upgrade(run_id, "v2")
    say(f"-> leasehold runs upgrade {run_id} --to v2   (pinned to {moved.pinned_build})\n")
    client.signal(run_id, "shipped", "parcel-B")
    parked = _until_status(client, run_id, RunStatus.RECONCILIATION_REQUIRED)
    error = parked.error
    if error is None or error.code != "version_drift":
        raise WalkthroughFailed(f"order B on v2 did not drift: {error}")
    details: dict[str, Any] = error.details or {}
    say(
        f"order B woke on v2 and parked {error.code}: step {details.get('position')} was "
        f"{details.get('recorded')!r}, v2 asks {details.get('taken')!r}; nothing replayed "
        "or charged\n"
    )
    return parked


def _patched_takes_both_paths(client: Client, old: str, say: Say) -> None:
    new = client.create("demo.checkout_patched", {"order": "D"}).id
    _until_status(client, new, RunStatus.WAITING)
    for run_id, parcel in ((old, "parcel-C"), (new, "parcel-D")):
        client.signal(run_id, "shipped", parcel)
    for run_id, name, patched in ((old, "C (begun on v1)", False), (new, "D (begun on v2)", True)):
        done = _until_status(client, run_id, RunStatus.SUCCEEDED)
        output = done.output
        if output["patched"] is not patched or done.build_id != "v2":
            raise WalkthroughFailed(
                f"order {name} took the wrong path on {done.build_id}: {output}"
            )
        say(f"order {name} finished on v2, patched={patched}: {output['steps']}\n")


def _v1_drained(client: Client, workers: StackWorkers, old: dict[int, Any], say: Say) -> None:
    until(lambda: client.build("v1").drained, "v1 to be drained")
    build = client.build("v1")
    say(f"GET /builds/v1: drained={build.drained}, pinned {build.pinned.model_dump()}\n")
    for pid, child in old.items():
        child.signal(signal.SIGTERM)
        child.wait(30)
        workers.pop(pid, None)
    say("v1's workers stopped (SIGTERM): nothing needed them\n")


def _until_status(client: Client, run_id: str, status: RunStatus) -> Run:
    until(lambda: client.get(run_id).status == status, f"{run_id} to be {status.value}")
    return client.get(run_id)
