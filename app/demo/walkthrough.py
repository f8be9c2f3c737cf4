"""``leasehold demo ...``: the stories the README teaches, scripted end to end.

Each starts a private stack (embedded Redis without persistence, one API, two
workers, short leases), posts a run, follows its events and plays the part of
the people and the failures in the story. Everything it starts is stopped at the
end, whatever happens.

* ``kill-worker``: ``kill -9`` the worker that owns a long run; the stream ends in
  ``orphaned: executor lease expired``. With ``--retry`` the run asks for
  ``on_lease_expired: "retry"`` and the surviving worker takes it over and finishes it.
* ``escalate``: a run waits, silent, on an approval; the watchdog's evaluator
  (``app.demo.judge``) answers ESCALATE, the run parks in ``waiting_human``, and a
  resume with a person's input finishes it.
* ``effect-unknown``: the owner is killed while a payment effect is in flight; the
  reconciler parks the run in ``reconciliation_required``; a person resolves it as
  applied and the retry finishes without charging twice.
* ``rerun``: an order is charged, then fails because shipping is down; once it is
  back, ``leasehold runs retry`` re-runs the failed run as a new linked run, which
  replays the recorded charge (same key) and ships: charged once, two runs linked.

``tenants`` (:mod:`app.demo.tenants`) runs on the same :func:`stack`, with a bootstrap
key on the API and one worker per namespace.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from app.client import Client
from app.demo import judge
from app.errors import LeaseholdError
from app.httpx_import import httpx
from app.models import Run, RunStatus
from app.render import EventPrinter, error_words
from app.settings import DEMO_HANDLERS
from app.stack.embedded import EmbeddedRedis, free_port
from app.stack.processes import Child, child_env, spawn, stop_all

READY_TIMEOUT_S = 30.0
# the escalate story needs no takeover: a lease TTL well above its operation's lease
ESCALATE_TTL_S = 3.0
# what a person answers the approval with
APPROVAL = {"approved_by": "you", "comment": "looks right"}
# the fake provider outlasts any demo: the charge is in flight when its owner is killed
PROVIDER_S = 600.0
# what the person found on the provider's dashboard, recorded as the effect's result
PROVIDER_RECEIPT = {"charge_id": "ch-from-the-dashboard", "amount": 42}
CHILD_STOP_GRACE_S = 15.0
POLL_S = 0.1


class StackWorkers(dict[int, Child]):
    """The stack's workers by pid; :meth:`start` adds one (a deploy's new build)."""

    def __init__(self, start: Callable[[Mapping[str, str]], Child]) -> None:
        super().__init__()
        self._start = start

    def start(self, own_env: Mapping[str, str]) -> Child:
        """Start one more worker with ``own_env`` on top of the stack's environment."""
        child = self._start(own_env)
        self[child.pid] = child
        return child


class WalkthroughFailed(LeaseholdError):
    """The stack did not come up, or the story did not end the way it should."""


@contextmanager
def stack(
    ttl_s: float,
    extra_env: Mapping[str, str] | None = None,
    *,
    api_env: Mapping[str, str] | None = None,
    worker_envs: Sequence[Mapping[str, str]] = ({}, {}),
) -> Iterator[tuple[str, StackWorkers]]:
    """Redis, an API and workers on private ports; yields the API URL and the workers.

    ``extra_env`` is every child's; ``api_env`` the API's alone; one worker starts per
    entry of ``worker_envs`` (two plain ones by default), with that entry on top. The
    workers come by pid, in the order of ``worker_envs``.
    """
    with tempfile.TemporaryDirectory(prefix="leasehold-demo-") as tmp:
        redis = EmbeddedRedis(
            data_dir=Path(tmp), appendonly=False, password=secrets.token_urlsafe(24)
        ).start()
        port = free_port()
        env = child_env(
            {
                "LEASEHOLD_REDIS_URL": redis.url,
                "LEASEHOLD_LEASE_TTL_S": str(ttl_s),
                "LEASEHOLD_API_PORT": str(port),
                "LEASEHOLD_PREFIX": "demo",
                # the demo's own handlers only: this stack runs nothing else
                "LEASEHOLD_HANDLERS": DEMO_HANDLERS,
                "LEASEHOLD_LOG_LEVEL": "WARNING",
            },
            extra_env or {},
        )
        children: list[Child] = []

        def start(name: str, own_env: Mapping[str, str], *args: str) -> Child:
            log_path = Path(tmp) / f"{name}.log"
            child = spawn(name, list(args), env={**env, **own_env}, log_path=log_path)
            children.append(child)
            return child

        try:
            start("api", api_env or {}, "api", "--port", str(port))
            workers = StackWorkers(
                lambda own_env: start(f"worker-{len(children)}", own_env, "worker")
            )
            for own_env in worker_envs:
                workers.start(own_env)
            yield f"http://127.0.0.1:{port}", workers
        finally:
            stop_all(children, CHILD_STOP_GRACE_S)
            redis.stop()


def until(probe: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Poll ``probe`` until it is true; WalkthroughFailed naming ``what`` past the timeout.

    A probe that raises (the API not up yet, an error answer) counts as not yet.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except (LeaseholdError, OSError, httpx.TransportError):
            pass  # not up yet
        time.sleep(POLL_S)
    raise WalkthroughFailed(f"timed out waiting for {what}")


def kill_worker(*, retry: bool, ttl_s: float, out: TextIO) -> Run:
    """Run the story; returns the run as it ended. Raises WalkthroughFailed."""
    with stack(ttl_s) as (url, workers), Client(url) as client:
        say = out.write
        until(lambda: len(client.workers()) == 2, "the API and two workers")
        say(f"stack up: API {url}, workers {sorted(workers)}, lease TTL {ttl_s}s\n")
        seconds = 2 * ttl_s if retry else 600
        run = client.create(
            "demo.sleep",
            {"seconds": seconds, "progress_every_s": ttl_s / 2},
            on_lease_expired="retry" if retry else "orphan",
            max_attempts=2,
        )
        say(
            f"posted {run.id} (demo.sleep {seconds:g}s, on_lease_expired="
            f"{'retry' if retry else 'orphan'})\n"
        )
        printer = EventPrinter(out)
        events = client.events(run.id)
        for event in events:
            printer.show(event)
            if event.type == "claimed":
                _kill_owner(str(event.data["owner_id"]), workers, say)
                break
        for event in events:
            printer.show(event)
        return _check(client.get(run.id), retry)


def _kill_owner(owner: str, workers: dict[int, Child], say: Callable[[str], object]) -> None:
    """``kill -9`` the worker named by an owner id."""
    pid = owner_pid(owner)
    say(f"-> kill -9 {pid} (the owner, {owner})\n")
    os.kill(pid, signal.SIGKILL)
    workers.pop(pid).wait(READY_TIMEOUT_S)


def owner_pid(owner: str) -> int:
    """The process id in a worker's owner id (``<host>-<pid>-<nonce>``)."""
    return int(owner.rsplit("-", 2)[1])


def expect(run: Run, status: RunStatus) -> Run:
    """The run, if it ended ``status``; else WalkthroughFailed saying how it did end."""
    if run.status != status:
        ending = f" ({error_words(run.error.code, run.error.message)})" if run.error else ""
        raise WalkthroughFailed(
            f"the run ended {run.status.value}{ending}, expected {status.value}"
        )
    return run


def escalate(*, op_lease_s: float, out: TextIO) -> Run:
    """The ESCALATE story; returns the run as it ended. Raises WalkthroughFailed."""
    evaluator = {"LEASEHOLD_WATCHDOG_EVALUATOR": judge.EVALUATOR}
    with stack(ESCALATE_TTL_S, evaluator) as (url, _), Client(url) as client:
        say = out.write
        until(lambda: len(client.workers()) == 2, "the API and two workers")
        say(f"stack up: API {url}, watchdog evaluator {judge.EVALUATOR}\n")
        run = client.create("demo.approval", {"lease_s": op_lease_s})
        say(f"posted {run.id} (demo.approval: waits, silent, on a person; lease {op_lease_s:g}s)\n")
        printer = EventPrinter(out)
        for event in client.events(run.id):
            printer.show(event)
            if event.type == "waiting_human":
                say(f"-> leasehold runs resume {run.id} --input '{json.dumps(APPROVAL)}'\n")
                client.resume(run.id, APPROVAL)
        done = expect(client.get(run.id), RunStatus.SUCCEEDED)
    say(f"output {json.dumps(done.output)}\n")
    return done


def effect_unknown(*, ttl_s: float, out: TextIO) -> Run:
    """The unknown-effect story; returns the run as it ended. Raises WalkthroughFailed."""
    with stack(ttl_s) as (url, workers), Client(url) as client:
        say = out.write
        until(lambda: len(client.workers()) == 2, "the API and two workers")
        say(f"stack up: API {url}, workers {sorted(workers)}, lease TTL {ttl_s}s\n")
        run = client.create("demo.charge", {"amount": 42, "provider_s": PROVIDER_S})
        say(f"posted {run.id} (demo.charge: the payment provider takes {PROVIDER_S:g}s)\n")
        printer = EventPrinter(out)
        owner = ""
        for event in client.events(run.id):
            printer.show(event)
            if event.type == "claimed":
                owner = str(event.data["owner_id"])
            elif event.type == "effect" and event.data.get("phase") == "started" and owner:
                _kill_owner(owner, workers, say)
                owner = ""
            elif event.type == "reconciliation_required":
                _resolve_applied(client, run.id, say)
        done = expect(client.get(run.id), RunStatus.SUCCEEDED)
    if done.output != {"receipt": PROVIDER_RECEIPT}:
        raise WalkthroughFailed(f"the retry did not return the recorded receipt: {done.output}")
    say(f"output {json.dumps(done.output)} (the recorded receipt: charged once)\n")
    return done


def _resolve_applied(client: Client, run_id: str, say: Callable[[str], object]) -> None:
    parked = client.get(run_id)
    effect = (parked.error.details if parked.error else {}).get("effect") or {}
    say(
        f"   nobody knows whether {effect.get('key')} charged; "
        "the provider's dashboard shows it did\n"
    )
    result = json.dumps(PROVIDER_RECEIPT)
    say(
        f"-> leasehold runs resolve {run_id} --action retry --effect-outcome applied "
        f"--effect-result '{result}'\n"
    )
    client.resolve(
        run_id,
        "retry",
        effect_outcome="applied",
        effect_result=PROVIDER_RECEIPT,
        note="checked the provider's dashboard",
    )


def _check(run: Run, retry: bool) -> Run:
    expect(run, RunStatus.SUCCEEDED if retry else RunStatus.ORPHANED)
    if not retry and (run.error is None or run.error.code != "lease_expired"):
        raise WalkthroughFailed(f"unexpected error on the orphaned run: {run.error}")
    return run


# how long the demo's shipping service stays down after the order is posted
SHIPPING_DOWN_S = 2.0


def rerun(*, out: TextIO) -> Run:
    """The re-run story; returns the new run as it ended. Raises WalkthroughFailed."""
    with stack(ESCALATE_TTL_S) as (url, _), Client(url) as client:
        say = out.write
        until(lambda: len(client.workers()) == 2, "the API and two workers")
        say(f"stack up: API {url}\n")
        down_until = time.time() + SHIPPING_DOWN_S
        run = client.create("demo.order", {"amount": 42, "shipping_down_until": down_until})
        say(f"posted {run.id} (demo.order: charge, then ship; shipping is down for a while)\n")
        printer = EventPrinter(out)
        for event in client.events(run.id):
            printer.show(event)
        failed = expect(client.get(run.id), RunStatus.FAILED)
        time.sleep(max(0.0, down_until - time.time()))
        say(f"   shipping is back\n-> leasehold runs retry {run.id}\n")
        new = client.retry(run.id)
        say(f"   {new.id} is its re-run (retry_of {new.retry_of})\n")
        for event in client.events(new.id):
            printer.show(event)
        done = expect(client.get(new.id), RunStatus.SUCCEEDED)
        old = client.get(failed.id)
    receipt = (done.output or {}).get("receipt", {})
    if receipt.get("idempotency_key") != f"{failed.id}:charge:1" or old.retried_by != done.id:
        raise WalkthroughFailed(f"the re-run did not replay the first charge: {done.output}")
    say(f"output {json.dumps(done.output)} (the first run's charge: charged once)\n")
    say(f"{failed.id} stays failed, re-run as {old.retried_by}\n")
    return done
