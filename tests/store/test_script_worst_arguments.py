"""Every script, fed its worst arguments, either succeeds or errors having written nothing.

Redis never rolls a script back, so a script that raises after its first write
leaves a half-made state forever (the bug this guards against: ``resume_run`` moved
the fence and set ``queued`` before cjson refused to encode ``1e400``). For each
script a realistic state is built on the real Redis, the exact call the store
would make is captured (not run), and each of its ARGV values in turn is replaced
by a hostile one: invalid or non-finite JSON, JSON nested past cjson's limit,
huge and garbage numbers, empty strings, a missing tail. A call that errors must
leave every key under the test's prefix exactly as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from app.models import RunStatus
from app.models.read import QueueLimits, RateLimitSpec
from app.settings import Settings
from app.store.builds.store import BuildStore
from app.store.family.children import ChildStore, JoinMode, OnParentEnd, SpawnLimits
from app.store.flow.store import FlowStore
from app.store.keys import GlobalKeys, QueueKeys
from app.store.leases.store import Lease, LeaseRenewer, LeaseStore, Outcome
from app.store.lua.scripts import ScriptArg, ScriptCall, Scripts
from app.store.outbox.store import Outbox
from app.store.progress.store import EffectCall, EffectOutcome, ProgressStore
from app.store.queues.store import QueueStore
from app.store.ratelimits.store import Declared, RateLimitStore
from app.store.redis.connection import async_client
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from app.store.schedules.store import Fire, ScheduleStore
from app.store.waits.store import WaitCall, WaitKind, WaitStore
from tests.support.reconciliation import park_on_unknown_effect
from tests.support.snapshots import changes, snapshot

QUEUE = "default"
OWNER = "w-1"
DEEP = "[" * 1001 + "]" * 1001
# a snapshot SCANs every key of its database, and the session's database 0 holds every
# earlier test's keys: here, hundreds of snapshots per script cost O(the whole session)
# each (fire_schedule's case: 2.5 s alone, 66 s after the rest of tests/store)
OWN_DB = 9


@pytest.fixture
async def redis_client(redis_url: str, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A client on a database of this module's own; the test's keys are deleted after it.

    Only keys under the test's prefix are deleted (never a flush): the session's Redis
    may be one this session did not start (LEASEHOLD_TEST_REDIS_URL).
    """
    client = async_client(urlunsplit(urlsplit(redis_url)._replace(path=f"/{OWN_DB}")))
    yield client
    keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
    if keys:
        await client.unlink(*keys)
    await client.aclose()


WORST: list[ScriptArg] = [
    "",
    "x",
    "{",
    "1e400",
    "[1e400]",
    "NaN",
    "Infinity",
    '{"a": -Infinity}',
    DEEP,
    "-1",
    "1.5",
    "0x10",
    "99999999999999999999999",
    "null",
]


class Captured(Exception):
    """Raised instead of running a script: carries the call the store was about to make."""

    def __init__(self, call: ScriptCall) -> None:
        super().__init__(call.name)
        self.call = call


class CapturingScripts(Scripts):
    """Scripts that record the first call a store makes and run nothing."""

    async def run(self, client: Any, call: ScriptCall) -> Any:
        raise Captured(ScriptCall(call.name, list(call.keys), list(call.args)))

    async def pipeline(
        self, client: Any, calls: Sequence[ScriptCall], **_options: Any
    ) -> list[Any]:
        raise Captured(calls[0])

    def run_sync(self, client: Any, call: ScriptCall) -> Any:
        raise Captured(ScriptCall(call.name, list(call.keys), list(call.args)))


async def capture(action: Awaitable[Any]) -> ScriptCall:
    """The script call ``action`` makes first, without running it."""
    with pytest.raises(Captured) as caught:
        await action
    return caught.value.call


class World:
    """The stores on one prefix, and the same stores capturing instead of calling."""

    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        real, fake = Scripts(), CapturingScripts()
        self.client = client
        self.settings = settings
        self.keys = QueueKeys(settings.prefix, QUEUE)
        self.runs = RunStore.for_settings(client, real, settings)
        self.leases = LeaseStore.for_settings(client, real, settings)
        self.progress = ProgressStore.for_settings(client, real, settings)
        self.c_runs = RunStore.for_settings(client, fake, settings)
        self.c_leases = LeaseStore.for_settings(client, fake, settings)
        self.c_progress = ProgressStore.for_settings(client, fake, settings)
        self.waits = WaitStore.for_settings(client, real, settings)
        self.c_waits = WaitStore.for_settings(client, fake, settings)
        self.c_renewer = LeaseRenewer(
            None,  # type: ignore[arg-type]  # never used: the call is captured first
            scripts=fake,
            prefix=settings.prefix,
            lease_ttl_ms=settings.lease_ttl_ms,
        )

    async def queued(self, **extra: Any) -> str:
        created = await self.runs.create(NewRun(handler="demo.echo", input={"n": 1}, **extra))
        return created.run.id

    async def held(self, count: int = 1) -> list[Lease]:
        """The leases of runs running under OWNER."""
        for _ in range(count):
            await self.queued(max_attempts=3, on_lease_expired="retry")
        claim = await self.leases.claim(QUEUE, OWNER, count)
        return [run.lease for run in claim.runs]

    async def waiting_human(self) -> str:
        (lease,) = await self.held()
        escalation = Outcome(lease, RunStatus.WAITING_HUMAN, output_json='{"reason":"stuck"}')
        await self.leases.finish_and_claim(QUEUE, OWNER, [escalation], 0)
        return lease.run_id


Setup = Callable[[World], Awaitable[ScriptCall]]


async def _create(w: World) -> ScriptCall:
    await w.queued(idempotency_key="k-0")
    await w.queued(singleton_key="s-1")  # queued: replace_queued supersedes it
    new = NewRun(
        handler="demo.echo",
        input={"a": [1, 2]},
        idempotency_key="k-1",
        budget={"max_steps": 3},
        concurrency_key="tenant-1",
        singleton_key="s-1",
        on_conflict="replace_queued",
        priority=3,
        boost_ms=3000,
        # a child's create: its parent's id, its tree's root and its depth are checked too
        parent_id=f"{QUEUE}.01JABCDEFGHJKMNPQRSTVWXYZ0",
        root_id=f"{QUEUE}.01JABCDEFGHJKMNPQRSTVWXYZ1",
        depth=2,
    )
    return await capture(w.c_runs.create(new))


async def _create_many(w: World) -> ScriptCall:
    """Two runs in one create_runs call: a worst value in the second writes nothing of the first."""
    await w.queued(idempotency_key="k-0")
    news = [
        NewRun(handler="demo.echo", input={"a": 1}, idempotency_key="k-2"),
        NewRun(
            handler="demo.echo",
            input={"a": [1, 2]},
            idempotency_key="k-3",
            budget={"max_steps": 3},
            concurrency_key="tenant-1",
            priority=3,
            boost_ms=3000,
            delay_ms=5000,
        ),
    ]
    return await capture(w.c_runs.create_many(news))


def _flow(w: World, scripts: Scripts) -> FlowStore:
    return FlowStore(
        w.client, scripts=scripts, prefix=w.settings.prefix, events_maxlen=w.settings.events_maxlen
    )


async def _set_limits(w: World) -> ScriptCall:
    await _flow(w, Scripts()).set_limits(QUEUE, QueueLimits(default_key=1))
    for _ in range(2):
        await w.queued(concurrency_key="t")
    await w.leases.claim(QUEUE, OWNER, 5)  # one lane blocked on k:t
    limits = QueueLimits(queue=5, handlers={"demo.echo": 2}, default_key=2, keys={"t": 3})
    return await capture(_flow(w, CapturingScripts()).set_limits(QUEUE, limits))


async def _set_priority(w: World) -> ScriptCall:
    run_id = await w.queued(priority=1, boost_ms=1000)
    return await capture(_flow(w, CapturingScripts()).set_priority(run_id, 5, 5000))


async def _recount_slots(w: World) -> ScriptCall:
    await _flow(w, Scripts()).set_limits(QUEUE, QueueLimits(default_key=1))
    for _ in range(2):
        await w.queued(concurrency_key="t", singleton_key="one")
    await w.leases.claim(QUEUE, OWNER, 5)
    await w.client.hset(w.keys.slots, "k:t", 7)  # drifted
    return await capture(_flow(w, CapturingScripts()).recount(QUEUE))


async def _claim(w: World) -> ScriptCall:
    await _flow(w, Scripts()).set_limits(QUEUE, QueueLimits(default_key=1))
    for _ in range(3):
        await w.queued(concurrency_key="t")  # one claimed below, the others wait on k:t
    await w.queued()
    (lease,) = await w.held()
    failed = Outcome(lease, RunStatus.FAILED, error_json='{"code":"x"}', retry_delay_ms=1)
    await w.leases.finish_and_claim(QUEUE, OWNER, [failed], 0)
    return await capture(w.c_leases.claim(QUEUE, OWNER, 2, token="t-1"))


async def _finish(w: World) -> ScriptCall:
    held = await w.held(3)
    outcomes = [
        Outcome(held[0], RunStatus.SUCCEEDED, output_json='{"ok":true}'),
        Outcome(held[1], RunStatus.FAILED, error_json='{"code":"e"}', retry_delay_ms=0),
        Outcome(held[2], RunStatus.WAITING_HUMAN, output_json='{"reason":"r"}'),
    ]
    return await capture(w.c_leases.finish_and_claim(QUEUE, OWNER, outcomes, 0))


async def _release(w: World) -> ScriptCall:
    held = await w.held(2)
    await w.runs.cancel(held[0].run_id)
    return await capture(w.c_leases.release(held, "drain"))


async def _pinned_queued(w: World) -> tuple[str, BuildStore]:
    """A run pinned to build b1 by its claim, queued again in b1's lanes (released)."""
    run_id = await w.queued(versioning="pinned")
    w.leases.build_id = "b1"
    claim = await w.leases.claim(QUEUE, OWNER, 1)
    w.leases.build_id = ""
    await w.leases.release([run.lease for run in claim.runs], "drain")
    return run_id, BuildStore.for_settings(w.client, CapturingScripts(), w.settings)


async def _upgrade_runs(w: World) -> ScriptCall:
    run_id, captured = await _pinned_queued(w)
    return await capture(captured.upgrade(QUEUE, [run_id], from_build="b1", to_build="b2"))


async def _note_unavailable(w: World) -> ScriptCall:
    _run_id, captured = await _pinned_queued(w)
    return await capture(captured.note_unavailable(QUEUE, ["b2"]))


async def _renew(w: World) -> ScriptCall:
    leases = await w.held(2)
    with pytest.raises(Captured) as caught:
        w.c_renewer.renew(leases)
    return caught.value.call


async def _append(w: World) -> ScriptCall:
    (lease,) = await w.held()
    events = [("progress", '{"step":1}'), ("token", '{"text":"hi"}')]
    return await capture(w.c_leases.append_events(lease, events))


async def _checkpoint(w: World) -> ScriptCall:
    (lease,) = await w.held()
    await w.progress.checkpoint(lease, state_json='{"i":1}', effect_seq_json="")
    return await capture(
        w.c_progress.checkpoint(lease, state_json='{"i":2}', effect_seq_json='{"charge":1}')
    )


async def _report_drift(w: World) -> ScriptCall:
    (lease,) = await w.held()
    details = '{"position":0,"recorded":"e|a:1","taken":"e|b:1"}'
    return await capture(w.c_progress.report_drift(lease, details))


async def _note_patch(w: World) -> ScriptCall:
    (lease,) = await w.held()
    return await capture(w.c_progress.note_patch(lease, "p" * 128, proposed=True))


async def _start_effect(w: World) -> ScriptCall:
    (lease,) = await w.held()
    first = EffectCall(lease.run_id, "charge", 1, idempotent=False)
    await w.progress.start_effect(lease, first)
    second = EffectCall(lease.run_id, "charge", 2, idempotent=False)
    return await capture(w.c_progress.start_effect(lease, second))


async def _record_effect(w: World) -> ScriptCall:
    (lease,) = await w.held()
    call = EffectCall(lease.run_id, "charge", 1, idempotent=False)
    await w.progress.start_effect(lease, call)
    return await capture(
        w.c_progress.record_effect(lease, call, EffectOutcome.APPLIED, '{"charged":10}')
    )


async def _cancel(w: World) -> ScriptCall:
    await w.held()
    return await capture(w.c_runs.cancel(await w.queued()))


async def _resume(w: World) -> ScriptCall:
    return await capture(w.c_runs.resume(await w.waiting_human(), {"answer": [1, 2.5]}))


async def _resolve(w: World) -> ScriptCall:
    from app.models.read import ResolveRequest

    parked = await park_on_unknown_effect(w.runs, w.leases, w.progress)
    decision = ResolveRequest(
        action="succeed", output={"o": 1}, effect_outcome="applied", effect_result={"r": 2}
    )
    return await capture(w.c_runs.resolve(parked.id, decision))


async def _reconcile(w: World) -> ScriptCall:
    held = await w.held(2)
    call = EffectCall(held[1].run_id, "charge", 1, idempotent=False)
    await w.progress.start_effect(held[1], call)
    for lease in held:  # the leases ran out: by the Redis clock, a while ago
        await w.client.hset(w.keys.run(lease.run_id), "lease_expires_at", 1)
        await w.client.zadd(w.keys.leases, {lease.run_id: 1})
    return await capture(w.c_leases.reconcile(QUEUE))


async def _declare_queue(w: World) -> ScriptCall:
    store = QueueStore(
        w.client,
        scripts=w.c_runs.scripts,
        prefix=w.settings.prefix,
        configured=[QUEUE],
        max_queues=3,
    )
    return await capture(store.declare("other"))


async def _undeclare_queue(w: World) -> ScriptCall:
    store = QueueStore(
        w.client,
        scripts=w.c_runs.scripts,
        prefix=w.settings.prefix,
        configured=[QUEUE],
        max_queues=3,
    )
    await w.client.sadd(GlobalKeys(w.settings.prefix).queues, "other")  # declared, empty
    return await capture(store.undeclare("other"))


async def _delete_run(w: World) -> ScriptCall:
    run_id = await w.queued(idempotency_key="k-2")
    await w.runs.cancel(run_id)
    return await capture(w.c_runs.delete(run_id))


async def _expire_queued(w: World) -> ScriptCall:
    for _ in range(2):
        run_id = await w.queued()
        await w.client.zadd(w.keys.unclaimed, {run_id: 1})  # its queued TTL ran out long ago
    return await capture(w.c_leases.expire_queued(QUEUE))


async def _read_events(w: World) -> ScriptCall:
    run_id = await w.queued()
    return await capture(w.c_runs.read_new_events(run_id, after="0-0", added=0))


async def _retry_run(w: World) -> ScriptCall:
    from app.store.runs.reruns import Rerun, retry_call

    (lease,) = await w.held()
    run_id = lease.run_id
    call = EffectCall(run_id, "charge", 1, idempotent=False)
    await w.progress.start_effect(lease, call)
    await w.progress.record_effect(lease, call, EffectOutcome.APPLIED, "1")
    await w.progress.checkpoint(lease, state_json='{"i":1}', effect_seq_json="")
    failed = Outcome(lease, RunStatus.FAILED, error_json='{"code":"x"}')
    await w.leases.finish_and_claim(QUEUE, OWNER, [failed], 0)
    return retry_call(w.runs, Rerun(run_id, idempotency_key="k-3"))


def _rate_limits(w: World, scripts: Scripts) -> RateLimitStore:
    return RateLimitStore(w.client, scripts=scripts, prefix=w.settings.prefix, max_keys=3)


OPENAI = Declared("openai", "openai", RateLimitSpec(limit=10, period_s=1.0, burst=2))


async def _take_tokens(w: World) -> ScriptCall:
    await _rate_limits(w, Scripts()).take(OPENAI, cost=1, max_wait_ms=0)  # a TAT exists
    return await capture(_rate_limits(w, w.c_runs.scripts).take(OPENAI, cost=2, max_wait_ms=500))


async def _push_bucket(w: World) -> ScriptCall:
    await _rate_limits(w, Scripts()).take(OPENAI, cost=1, max_wait_ms=0)
    return await capture(_rate_limits(w, w.c_runs.scripts).push(OPENAI, retry_after_ms=2000))


async def _declare_rate_limit(w: World) -> ScriptCall:
    await _rate_limits(w, Scripts()).declare("openai", OPENAI.spec)
    spec = RateLimitSpec(limit=5, period_s=60, burst=5)
    return await capture(_rate_limits(w, w.c_runs.scripts).declare("crm:{tenant}", spec))


async def _commit_operation(w: World) -> ScriptCall:
    from app.models.read import RetryFilter
    from app.store.operations.store import OperationStore

    fake = OperationStore(
        w.client, scripts=w.c_runs.scripts, prefix=w.settings.prefix, retention_ms=600_000
    )
    real = OperationStore(
        w.client, scripts=w.runs.scripts, prefix=w.settings.prefix, retention_ms=600_000
    )
    progress = await real.create(RetryFilter(), limit=5)
    await real.commit(progress.operation_id, driver="api-1", lease_ms=60_000, fields={"steps": 1})
    return await capture(
        fake.commit(
            progress.operation_id,
            driver="api-1",
            lease_ms=60_000,
            fields={"steps": 2, "cursor": "c", "status": "done"},
        )
    )


async def _park(w: World) -> ScriptCall:
    (lease,) = await w.held()
    run_id = lease.run_id
    slept = WaitCall(run_id, WaitKind.SLEEP, "nap", 1, duration_ms=0)  # over at once
    await w.waits.park(lease, slept)
    await w.c_runs.client.hset(w.keys.waits(run_id), "inbox:go", '["1"]')
    asked = WaitCall(run_id, WaitKind.HUMAN, "ask", 1, question_json='{"q":[1,2.5]}')
    return await capture(w.c_waits.park(lease, asked))


async def _signal(w: World) -> ScriptCall:
    (lease,) = await w.held()
    run_id = lease.run_id
    wait = WaitCall(run_id, WaitKind.SIGNAL, "go", 1, duration_ms=60_000)
    await w.waits.park(lease, wait)
    await w.waits.signal(run_id, "later", "1", max_pending=3, signal_id="sig-0")
    return await capture(
        w.c_waits.signal(run_id, "go", '{"ok":[1,2.5]}', max_pending=3, signal_id="sig-1")
    )


async def _spawn_child(w: World) -> ScriptCall:
    (lease,) = await w.held()
    real = ChildStore(w.runs.ctx)
    limits = SpawnLimits(max_children=5, max_depth=3)
    # a recorded step and a detached child already in the family
    await real.record_spawn(
        lease, ordinal=1, child_queue=QUEUE, on_parent_end=OnParentEnd.DETACH, limits=limits
    )
    captured = ChildStore(w.c_runs.ctx)
    return await capture(
        captured.record_spawn(
            lease, ordinal=2, child_queue=QUEUE, on_parent_end=OnParentEnd.CANCEL, limits=limits
        )
    )


async def _family(w: World) -> tuple[Lease, list[str]]:
    """A held parent with two children on its queue: one ended (in the outbox), one queued."""
    (lease,) = await w.held()
    real = ChildStore(w.runs.ctx)
    ids = []
    for ordinal in (1, 2):
        step = await real.record_spawn(
            lease,
            ordinal=ordinal,
            child_queue=QUEUE,
            on_parent_end=OnParentEnd.CANCEL,
            limits=SpawnLimits(),
        )
        await real.create_child(
            NewRun(
                handler="demo.echo",
                input={"n": 1},
                run_id=step.child_id,
                parent_id=lease.run_id,
                root_id=step.root_id,
                depth=step.depth,
            )
        )
        ids.append(step.child_id)
    await w.runs.cancel(ids[0])
    return lease, ids


async def _join_children(w: World) -> ScriptCall:
    lease, ids = await _family(w)
    captured = ChildStore(w.c_runs.ctx)
    return await capture(
        captured.join(lease, ordinal=1, mode=JoinMode.ALL, child_ids=ids, timeout_ms=60_000)
    )


async def _child_ended(w: World) -> ScriptCall:
    lease, ids = await _family(w)
    await ChildStore(w.runs.ctx).join(
        lease, ordinal=1, mode=JoinMode.SETTLED, child_ids=ids, timeout_ms=None
    )
    await w.leases.claim(QUEUE, OWNER, 5)  # the second child runs
    await w.c_runs.client.hset(
        w.keys.run(ids[1]), mapping={"status": "succeeded", "output": '{"a":[1,2.5]}'}
    )
    return await capture(Outbox(w.c_runs.ctx).deliver(QUEUE, f"ended {ids[1]}"))


async def _cancel_children(w: World) -> ScriptCall:
    lease, _ids = await _family(w)
    await ChildStore(w.runs.ctx).record_spawn(
        lease,
        ordinal=3,
        child_queue=QUEUE,
        on_parent_end=OnParentEnd.CANCEL,
        limits=SpawnLimits(),
    )  # never created: a tombstone
    await w.leases.finish_and_claim(QUEUE, OWNER, [Outcome(lease, RunStatus.SUCCEEDED)], 0)
    return await capture(Outbox(w.c_runs.ctx).deliver(QUEUE, f"cascade {lease.run_id}"))


async def _take_outbox(w: World) -> ScriptCall:
    await _family(w)
    return await capture(Outbox(w.c_runs.ctx).take(QUEUE))


def _schedule_fields(**extra: object) -> dict[str, object]:
    return {
        "queue": QUEUE,
        "handler": "demo.echo",
        "input": '{"n":1}',
        "max_attempts": 1,
        "on_lease_expired": "orphan",
        "metadata": "{}",
        "budget": "",
        "retention_ms": "",
        "queued_ttl_ms": "",
        "run": '{"handler":"demo.echo"}',
        "cron": "",
        "timezone": "UTC",
        "interval_ms": 1000,
        "anchor_ms": 0,
        "overlap": "cancel_previous",
        "missed": "all",
        "catchup_window_ms": 60_000,
        "paused": "0",
        **extra,
    }


def _schedule_stores(w: World) -> tuple[ScheduleStore, ScheduleStore]:
    real = ScheduleStore.for_settings(w.client, w.runs.scripts, w.settings)
    return real, ScheduleStore.for_settings(w.client, CapturingScripts(), w.settings)


async def _put_schedule(w: World) -> ScriptCall:
    real, captured = _schedule_stores(w)
    await real.create("nightly", QUEUE, _schedule_fields(next_fire_ms=5000))
    change = _schedule_fields(cron="0 2 * * *", interval_ms="", next_fire_ms=9000)
    return await capture(captured.update("nightly", change, 1))


async def _fire_schedule(w: World) -> ScriptCall:
    real, captured = _schedule_stores(w)
    await real.create("every", QUEUE, _schedule_fields(next_fire_ms=1000))
    record = await real.record("every")
    await real.fire(record, Fire("trigger", [500], record.version))  # a previous run to cancel
    await w.leases.claim(QUEUE, OWNER, 1)  # ... which is running
    record = await real.record("every")
    fire = Fire("tick", [1000, 2000], record.version, expected_ms=1000, next_ms=3000, missed=1)
    return await capture(captured.fire(record, fire))


SETUPS: dict[str, Setup] = {
    "put_schedule": _put_schedule,
    "fire_schedule": _fire_schedule,
    "create_run": _create,
    "create_runs": _create_many,
    "claim_runs": _claim,
    "finish_runs": _finish,
    "release_runs": _release,
    "renew_leases": _renew,
    "append_events": _append,
    "checkpoint_run": _checkpoint,
    "start_effect": _start_effect,
    "report_drift": _report_drift,
    "note_patch": _note_patch,
    "record_effect": _record_effect,
    "cancel_run": _cancel,
    "resume_run": _resume,
    "resolve_run": _resolve,
    "reconcile_expired": _reconcile,
    "read_events": _read_events,
    "declare_queue": _declare_queue,
    "undeclare_queue": _undeclare_queue,
    "delete_run": _delete_run,
    "expire_queued": _expire_queued,
    "retry_run": _retry_run,
    "take_tokens": _take_tokens,
    "push_bucket": _push_bucket,
    "declare_rate_limit": _declare_rate_limit,
    "commit_operation": _commit_operation,
    "park_run": _park,
    "signal_run": _signal,
    "set_limits": _set_limits,
    "set_priority": _set_priority,
    "recount_slots": _recount_slots,
    "spawn_child": _spawn_child,
    "join_children": _join_children,
    "child_ended": _child_ended,
    "cancel_children": _cancel_children,
    "take_outbox": _take_outbox,
    "upgrade_runs": _upgrade_runs,
    "note_unavailable": _note_unavailable,
}


def test_every_script_has_a_worst_argument_setup() -> None:
    assert set(SETUPS) == set(Scripts().names)


Mutation = Callable[[Sequence[ScriptArg]], list[ScriptArg]]


def _replace(i: int, value: ScriptArg) -> Mutation:
    return lambda args: [*args[:i], value, *args[i + 1 :]]


def variants(count: int) -> list[tuple[str, Mutation]]:
    """Each of ``count`` ARGV values replaced by each worst value, and the list cut short."""
    out: list[tuple[str, Mutation]] = [(f"ARGV[{count}] missing", lambda args: list(args[:-1]))]
    for i in range(count):
        for value in WORST:
            out.append((f"ARGV[{i + 1}]={str(value)[:12]!r}", _replace(i, value)))
    return out


@pytest.mark.parametrize("name", sorted(SETUPS))
async def test_a_script_that_errors_wrote_nothing(
    name: str, redis_client: aioredis.Redis, settings: Settings
) -> None:
    scripts = Scripts()
    worlds = 0

    async def fresh() -> tuple[str, ScriptCall, dict[str, Any]]:
        """The script's call on a new state under a prefix of its own, and that state.

        The last world's keys go first: every snapshot SCANs the whole database, so
        keeping only one world there keeps each snapshot as small as one world.
        """
        nonlocal worlds
        if worlds:
            old = [k async for k in redis_client.scan_iter(match=f"{prefix}:*", count=1000)]
            if old:
                await redis_client.unlink(*old)
        worlds += 1
        own = settings.model_copy(update={"prefix": f"{settings.prefix}-{worlds}"})
        made = await SETUPS[name](World(redis_client, own))
        return own.prefix, made, await snapshot(redis_client, own.prefix)

    prefix = ""
    prefix, call, state = await fresh()
    assert call.name == name
    refused = 0
    for label, mutate in variants(len(call.args)):
        try:
            await scripts.run(redis_client, ScriptCall(name, call.keys, mutate(call.args)))
        except ResponseError as exc:
            refused += 1
            after = await snapshot(redis_client, prefix)
            assert not changes(state, after), f"{name} with {label} raised {exc} after writing"
            state = after  # unchanged: the next variant starts from it
            continue
        after = await snapshot(redis_client, prefix)
        if changes(state, after):
            prefix, call, state = await fresh()  # it worked: the next one starts afresh
        else:
            state = after
    assert refused > 0, f"no worst argument made {name} refuse anything"


async def test_resume_with_a_non_finite_input_is_refused_and_changes_nothing(
    redis_client: aioredis.Redis, settings: Settings
) -> None:
    """The issue's case: 1e400 reaches the script; the fence, status and queue stay put."""
    world = World(redis_client, settings)
    call = await _resume(world)
    before = await snapshot(redis_client, settings.prefix)
    args = list(call.args)
    args[1] = '{"x":1e400}'
    with pytest.raises(ResponseError, match="bad argument resume_input"):
        await Scripts().run(redis_client, ScriptCall("resume_run", call.keys, args))
    assert not changes(before, await snapshot(redis_client, settings.prefix))
    run_id = str(call.args[0])
    await world.runs.resume(run_id, {"x": 1})  # and a good resume still works afterwards
    assert (await world.runs.get(run_id)).status == "queued"
