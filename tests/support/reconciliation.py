"""Put a run in reconciliation_required the way production does, without waiting for a TTL.

Owner A starts a non-idempotent effect and releases the run (as a drain would
mid-effect); owner B claims it and reaches the same effect: its outcome is
unknown, so the start_effect script parks the run.
"""

from __future__ import annotations

from app.store.leases.store import ClaimedRun, Lease, LeaseStore
from app.store.progress.store import EffectAnswer, EffectCall, ProgressStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore

OWNER_A = "w-a"
OWNER_B = "w-b"
EFFECT = "charge"


async def park_on_unknown_effect(
    run_store: RunStore, lease_store: LeaseStore, progress: ProgressStore, queue: str = "default"
) -> ClaimedRun:
    """Create a run and park it; returns owner B's (now fenced out) claim of it."""
    await run_store.create(NewRun(handler="demo.echo", input={}, queue=queue))
    first = (await lease_store.claim(queue, OWNER_A, 1)).runs[0]
    call = EffectCall(first.id, EFFECT, 1, idempotent=False)
    await progress.start_effect(Lease(queue, call.run_id, OWNER_A, first.fence), call)
    await lease_store.release([Lease(queue, first.id, OWNER_A, first.fence)], "drain")
    second = (await lease_store.claim(queue, OWNER_B, 1)).runs[0]
    found = await progress.start_effect(Lease(queue, call.run_id, OWNER_B, second.fence), call)
    assert found.answer == EffectAnswer.UNKNOWN
    return second
