"""``leasehold demo tenants``: two tenants on one deployment, kept apart, one at its quota.

The README's "Namespaces (tenants)" and "Quotas", played on a private
:func:`~app.demo.walkthrough.stack` whose API needs a key (a random bootstrap key: the
admin's) and whose two workers each serve queue ``work`` of one namespace:

1. the admin declares ``acme`` (at most 3 live runs, 5 creates a second) and ``bravo``
   (no quotas), and makes a submit key bound to each;
2. acme's runs run on acme's worker; bravo's key gets a 404 for acme's run id, as for an
   id that never existed, and lists no runs;
3. acme fills its ``live_runs`` quota with long sleeps: the next create is a 429
   ``quota-exceeded`` naming the quota, its limit and when to ask again;
4. bravo, meanwhile, runs its work on its own worker as if acme were idle.

Namespaces have no client method yet, so the admin declares them with the PUT the README
shows with curl; the refused create is read off the wire because its ``Retry-After`` is a
header, which :class:`~app.errors.ApiError` does not keep.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any, TextIO

from app.client import Client
from app.demo.walkthrough import WalkthroughFailed, expect, owner_pid, stack, until
from app.errors import ApiError
from app.httpx_import import httpx
from app.models import Run, RunStatus
from app.render import EventPrinter

ACME, BRAVO = "acme", "bravo"
QUEUE = "work"
ACME_QUOTAS = {"live_runs": 3, "creates_per_s": 5}
TTL_S = 3.0
# acme's long runs outlast the demo: they hold its live_runs quota until the stack stops
LONG_SLEEP_S = 600.0
# a worker releases what it still runs at once when the stack stops: acme's long sleeps
# would otherwise hold its worker for the whole drain (30 s by default)
WORKER_ENV = {"LEASEHOLD_QUEUES": QUEUE, "LEASEHOLD_DRAIN_TIMEOUT_S": "0"}

Say = Callable[[str], object]


def tenants(*, out: TextIO) -> Run:
    """The tenants story; returns bravo's run as it ended. Raises WalkthroughFailed."""
    bootstrap = secrets.token_urlsafe(24)
    api_env = {"LEASEHOLD_API_KEYS": bootstrap}
    worker_envs = [{**WORKER_ENV, "LEASEHOLD_NAMESPACE": name} for name in (ACME, BRAVO)]
    with stack(TTL_S, api_env=api_env, worker_envs=worker_envs) as (url, workers):
        serving = dict(zip((ACME, BRAVO), workers, strict=True))  # namespace -> worker pid
        with Client(url, api_key=bootstrap) as admin:
            until(lambda: bool(admin.handlers()), "the API")
            out.write(
                f"stack up: API {url} (keys required: the admin holds the bootstrap key), "
                f"worker {serving[ACME]} serves {ACME}, worker {serving[BRAVO]} serves "
                f"{BRAVO}, both queue {QUEUE}\n"
            )
            return _play(admin, url, serving, out)


def _play(admin: Client, url: str, serving: dict[str, int], out: TextIO) -> Run:
    """The story on a stack that is up: ``serving`` is each namespace's worker pid."""
    say = out.write
    _declare(admin, ACME, ACME_QUOTAS, say)
    _declare(admin, BRAVO, {}, say)
    with (
        Client(url, api_key=_tenant_key(admin, ACME, say)) as acme,
        Client(url, api_key=_tenant_key(admin, BRAVO, say)) as bravo,
    ):
        until(lambda: _serving(acme) and _serving(bravo), "each namespace's worker and queue")
        printer = EventPrinter(out)
        _kept_apart(acme, bravo, serving[ACME], printer, say)
        _fill_live_runs(acme, say)
        say(f"{BRAVO} posts while {ACME} is at its quota\n")
        run = bravo.create("demo.echo", {"message": f"hello from {BRAVO}"}, queue=QUEUE)
        return _ran_on(bravo, run, serving[BRAVO], BRAVO, printer, say)


def _declare(admin: Client, name: str, quotas: dict[str, int], say: Say) -> None:
    """PUT /namespaces/{name} with the bootstrap (admin) key: 201, a new namespace."""
    body = {"quotas": quotas}
    say(f"-> PUT /namespaces/{name} {json.dumps(body)}  (admin)\n")
    answer = admin.http.put(f"/namespaces/{name}", json=body)
    if answer.status_code != 201:
        raise WalkthroughFailed(f"declaring {name}: HTTP {answer.status_code} {answer.text}")
    shown = {quota: limit for quota, limit in answer.json()["quotas"].items() if limit is not None}
    say(f"   201: {name} declared, quotas {json.dumps(shown) if shown else 'none'}\n")


def _tenant_key(admin: Client, name: str, say: Say) -> str:
    """A submit key bound to ``name``: it reaches that namespace and no other."""
    key = admin.create_key(f"{name}-ci", "submit", namespace=name)
    say(f"-> leasehold keys create {name}-ci --role submit --namespace {name}  (admin)\n")
    say(f"   {key.id}: a submit key of {name} only\n")
    return key.secret


def _serving(client: Client) -> bool:
    """The key's namespace has its worker up and queue ``work`` declared (by the worker)."""
    queues = {queue.name for queue in client.queues().items}
    return len(client.workers()) == 1 and QUEUE in queues


def _kept_apart(
    acme: Client, bravo: Client, acme_pid: int, printer: EventPrinter, say: Say
) -> None:
    """acme's runs run on acme's worker; bravo's key neither reads nor lists them."""
    runs = [
        acme.create("demo.echo", {"message": f"hello from {ACME} {n}"}, queue=QUEUE) for n in (1, 2)
    ]
    for run in runs:
        _ran_on(acme, run, acme_pid, ACME, printer, say)
    try:
        bravo.get(runs[0].id)
    except ApiError as exc:
        if exc.status != 404:
            raise WalkthroughFailed(f"{BRAVO} reading {ACME}'s run: {exc}") from None
        say(f"{BRAVO} GET /runs/{runs[0].id} -> 404 {exc.problem.get('title')}\n")
    else:
        raise WalkthroughFailed(f"{BRAVO}'s key read {ACME}'s run {runs[0].id}")
    listed = bravo.list_runs().items
    if listed:
        raise WalkthroughFailed(f"{BRAVO}'s key lists runs: {[run.id for run in listed]}")
    say(f"{BRAVO} GET /runs -> no runs ({ACME} lists {len(acme.list_runs().items)})\n")


def _ran_on(client: Client, run: Run, pid: int, name: str, printer: EventPrinter, say: Say) -> Run:
    """Follow ``run`` to its end; it must succeed, claimed only by worker ``pid``."""
    say(f"{name} posted {run.id} ({run.handler} on queue {run.queue})\n")
    owners: set[int] = set()
    for event in client.events(run.id):
        printer.show(event)
        if event.type == "claimed":
            owners.add(owner_pid(str(event.data["owner_id"])))
    if owners != {pid}:
        raise WalkthroughFailed(f"{run.id} was claimed by {sorted(owners)}, not {name}'s {pid}")
    done = expect(client.get(run.id), RunStatus.SUCCEEDED)
    say(f"   ran on worker {pid} ({name}'s), output {json.dumps(done.output)}\n")
    return done


def _fill_live_runs(acme: Client, say: Say) -> None:
    """acme posts long sleeps until its live_runs quota refuses one: exactly the limit."""
    limit = ACME_QUOTAS["live_runs"]
    usage = _usage(acme, ACME)
    say(f"{ACME} holds {usage['live_runs']} live runs (quota live_runs {limit})\n")
    body = {"handler": "demo.sleep", "input": {"seconds": LONG_SLEEP_S}, "queue": QUEUE}
    posted: list[str] = []
    # bounded: the quota must refuse by the post after the limit
    for _ in range(limit + 1 - usage["live_runs"]):
        answer = acme.http.post("/runs", json=body)
        if answer.status_code != 201:
            _refused(answer, say)
            break
        posted.append(answer.json()["id"])
        say(f"{ACME} posted {posted[-1]} (demo.sleep {LONG_SLEEP_S:g}s)\n")
    else:
        raise WalkthroughFailed(f"{ACME}'s quota live_runs {limit} refused none of {posted}")
    if usage["live_runs"] + len(posted) != limit:
        raise WalkthroughFailed(f"refused after {len(posted)} long runs, not at {limit} live")


def _usage(client: Client, name: str) -> dict[str, Any]:
    """GET /namespaces/{name}: what the namespace holds now (measured afresh)."""
    answer = client.http.get(f"/namespaces/{name}")
    if answer.status_code != 200:
        raise WalkthroughFailed(f"reading {name}'s usage: HTTP {answer.status_code}")
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


def _refused(answer: httpx.Response, say: Say) -> None:
    """The create past the quota: a 429 problem naming live_runs, with Retry-After."""
    retry_after = answer.headers.get("Retry-After")
    try:
        problem: dict[str, Any] = answer.json()
    except ValueError:
        problem = {"body": answer.text}
    if answer.status_code != 429 or problem.get("quota") != "live_runs" or retry_after is None:
        raise WalkthroughFailed(
            f"expected a 429 naming live_runs with Retry-After, "
            f"got HTTP {answer.status_code}: {problem}"
        )
    say(
        f"{ACME} POST /runs -> 429 {problem['title']}: quota {problem['quota']}, "
        f"limit {problem['limit']}, namespace {problem['namespace']}, "
        f"Retry-After {retry_after}s\n   {problem.get('detail')}\n"
    )
