"""Re-running what ended badly: ``retry_run``, one ended run to one new linked run.

The model (README "Re-run what failed"): a retry never reopens the ended run. It
creates a **new run** on the same queue, with the same handler, input, metadata,
budgets, lease policy and retention, linked both ways (``retry_of`` on the new run,
``retried_by`` on the old one), in one script. So:

* the old run's stream is not touched: it still ends with its one terminal event,
  and a client that followed it learns nothing new there (the new run's ``created``
  event names ``retry_of``);
* the new run gets a copy of the old run's effect records, and its effect keys keep
  the *first* run's id (``retry_root``): a recorded effect is replayed, never called
  again, and an effect called anew gets the key the first run would have given it;
  one whose outcome is unknown parks the new run for a person, as a retry of the old
  run would have;
* ``checkpoint="keep"`` starts it from the old run's last checkpoint, ``"drop"``
  from the beginning;
* a run is re-run at most once at a time (a second retry is a 409 naming the re-run,
  or, with the same idempotency key, the same new run again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from app.errors import AlreadyRetried, IdempotencyConflict, RunNotFound, StoreError
from app.models import CheckpointChoice, Run
from app.store.codec import dumps, new_run_id
from app.store.keys import queue_of
from app.store.lua.scripts import ScriptCall, ScriptCode
from app.store.lua.transition import raise_for
from app.store.runs.bindings import RETRY_RUN, RetryArgs
from app.store.runs.store import RunStore


@dataclass(frozen=True)
class Rerun:
    """What a retry asks for: which run, how the new one starts, and the request's key."""

    run_id: str
    checkpoint: CheckpointChoice = "keep"
    max_attempts: int | None = None
    idempotency_key: str | None = None

    def fingerprint(self) -> str:
        """Hash of the request, to tell a replay of the same key from a conflict."""
        parts = ["retry", self.run_id, self.checkpoint, self.max_attempts]
        return hashlib.sha256(dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Retried:
    """Result of :func:`retry_run`: the new run, and whether it existed already."""

    run: Run
    replayed: bool


def retry_call(store: RunStore, rerun: Rerun) -> ScriptCall:
    """The ``retry_run`` call for ``rerun``; raises :class:`RunNotFound` for a malformed id."""
    queue = queue_of(rerun.run_id)
    if queue is None:
        raise RunNotFound(rerun.run_id)
    keys = store.keys(queue)
    args = RetryArgs(
        old_id=rerun.run_id,
        run_id=new_run_id(queue),
        checkpoint=rerun.checkpoint,
        idempotency_key=rerun.idempotency_key or "",
        fingerprint=rerun.fingerprint(),
        max_attempts="" if rerun.max_attempts is None else rerun.max_attempts,
        maxlen=store.events_maxlen,
        wake_channel=keys.wake_channel,
        queued_ttl_ms=store.queued_ttl_ms,
    )
    return RETRY_RUN.call(keys, args, rerun.run_id)


def settle(rerun: Rerun, raw: Any) -> tuple[str, bool] | Exception:
    """What one ``retry_run`` reply means: (the new run's id, replayed), or the error.

    An error is returned, not raised, so a pipeline of re-runs (a bulk retry) counts
    each on its own: :class:`RunNotFound`, :class:`InvalidTransition`,
    :class:`AlreadyRetried`, :class:`IdempotencyConflict`, or the error reply itself.
    """
    if isinstance(raw, Exception):
        return raw
    reply = RETRY_RUN.decode(raw)
    if reply.code == ScriptCode.CONFLICT and reply.detail == "retried":
        return AlreadyRetried(rerun.run_id, reply.run_id)
    if reply.code == ScriptCode.CONFLICT:
        return IdempotencyConflict(rerun.idempotency_key or "", reply.run_id)
    try:
        raise_for(reply.code, run_id=rerun.run_id, status=reply.detail, action="retry")
    except StoreError as exc:
        return exc
    return reply.run_id, reply.code == ScriptCode.REPLAYED


async def retry_run(store: RunStore, rerun: Rerun) -> Retried:
    """Re-run an ended run as a new linked run; see the module docstring.

    Raises :class:`RunNotFound`, :class:`InvalidTransition` (the run is live or
    succeeded), :class:`AlreadyRetried` (its re-run exists; retry that one), or
    :class:`IdempotencyConflict` (the key named another request).
    """
    outcome = settle(rerun, await store.scripts.run(store.client, retry_call(store, rerun)))
    if isinstance(outcome, Exception):
        raise outcome
    run_id, replayed = outcome
    return Retried(await store.get(run_id), replayed=replayed)
