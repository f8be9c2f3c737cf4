"""One trace from POST /runs to the terminal write, across a kill -9 takeover.

Real API and worker processes export with the SDK's OTLP/HTTP exporter, configured
only by LEASEHOLD_TRACING and the standard OTEL_* variables, to a receiver in the
test (tests/support/otlp.py).
"""

from __future__ import annotations

import json
import signal

import httpx

from app.models import RunStatus
from app.stack.embedded import free_port
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.otlp import ReceivedSpan, Receiver
from tests.support.polling import eventually, owner_pid, wait_status
from tests.support.processes import TEST_HANDLERS, Processes

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = CALLER.split("-")[1]


def traced_env(otlp: Receiver) -> dict[str, str]:
    return {
        "LEASEHOLD_TRACING": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: export soon, before the test kills the owner
        "LEASEHOLD_HANDLERS": f"{TEST_HANDLERS},tests.support.traced_handlers",
    }


async def spans_where(otlp: Receiver, what: str, until: object) -> list[ReceivedSpan]:
    async def probe() -> list[ReceivedSpan]:
        return otlp.spans()

    return await eventually(probe, until=until, what=what)  # type: ignore[arg-type]


def named(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def split_by_parent(
    spans: list[ReceivedSpan], prefix: str, attempt: ReceivedSpan
) -> tuple[ReceivedSpan, ReceivedSpan]:
    """The one span of this kind under another attempt, and the one under ``attempt``."""
    (lost,) = [span for span in named(spans, prefix) if span.parent_id != attempt.span_id]
    (taken,) = [span for span in named(spans, prefix) if span.parent_id == attempt.span_id]
    return lost, taken


async def test_one_trace_from_post_to_terminal_across_a_kill_9_takeover(
    processes: Processes, run_store: RunStore, otlp: Receiver
) -> None:
    env = traced_env(otlp)
    _, url = processes.api(**env, OTEL_SERVICE_NAME="api-under-test")
    first = processes.worker(**env)
    async with httpx.AsyncClient(base_url=url) as http:
        created = await http.post(
            "/runs",
            json={
                "handler": "test.traced",
                "input": {},
                "max_attempts": 2,
                "on_lease_expired": "retry",
            },
            headers={"traceparent": CALLER},
        )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    running = await wait_status(run_store, run_id, RunStatus.RUNNING)
    assert owner_pid(running) == first.pid
    # the first attempt's operation and effect are done (and exported) before it is killed
    await spans_where(
        otlp, "the first attempt's effect span", lambda s: named(s, "leasehold.effect")
    )

    metrics_port = free_port()
    second = processes.worker(
        **env, LEASEHOLD_WORKER_METRICS_PORT=str(metrics_port), LEASEHOLD_LOG_FORMAT="json"
    )
    first.signal(signal.SIGKILL)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    spans = await spans_where(
        otlp, "the second attempt's span", lambda s: len(named(s, "leasehold.attempt")) == 1
    )

    # one trace, from the caller's context to the terminal write
    ours = named(spans, "leasehold.")  # (FastAPI's own spans of other requests aside)
    assert len(ours) == 7
    assert {span.trace_id for span in ours} == {TRACE_ID}
    (create,) = named(spans, "leasehold.create")
    assert (create.service, create.parent_id) == ("api-under-test", CALLER.split("-")[2])
    assert create.attributes["leasehold.run_id"] == run_id
    (queue_wait,) = named(spans, "leasehold.queue_wait")
    assert queue_wait.parent_id == create.span_id
    (attempt,) = named(spans, "leasehold.attempt")
    assert attempt.parent_id == create.span_id
    assert attempt.attributes["leasehold.attempt"] == 2
    assert attempt.attributes["leasehold.fence"] == done.fence
    assert int(attempt.attributes["leasehold.owner_id"].rsplit("-", 2)[1]) == second.pid
    assert attempt.attributes["leasehold.outcome"] == "succeeded"
    # the lost attempt never ended its span (kill -9), but its children name it as parent
    lost_operation, taken_operation = split_by_parent(spans, "leasehold.operation", attempt)
    lost_effect, taken_effect = split_by_parent(spans, "leasehold.effect", attempt)
    assert lost_operation.parent_id == lost_effect.parent_id != attempt.span_id
    # the taken-over attempt links to the lost one and says whose it was
    assert attempt.links == [(TRACE_ID, lost_operation.parent_id)]
    assert attempt.event("takeover")["leasehold.previous_owner_id"] == running.owner_id
    assert attempt.event("takeover")["leasehold.previous_fence"] == running.fence
    assert {"wait", "verdict"} <= {name for name, _ in taken_operation.events}
    assert taken_operation.event("verdict")["leasehold.verdict"] == "RENEW"
    assert taken_effect.attributes.get("leasehold.replayed") is True  # attempt 1 recorded it

    # the attempt's duration carries its trace id as an exemplar (OpenMetrics)
    async with httpx.AsyncClient() as http:
        scraped = await http.get(
            f"http://127.0.0.1:{metrics_port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
    exemplars = [
        line
        for line in scraped.text.splitlines()
        if line.startswith("leasehold_run_attempt_seconds_bucket") and "# {" in line
    ]
    assert exemplars and all(f'trace_id="{TRACE_ID}"' in line for line in exemplars)
    # and so do the handler's JSON log lines
    assert second.log_path is not None
    lines = [
        json.loads(line)
        for line in second.log_path.read_text().splitlines()
        if line.startswith("{")
    ]
    (logged,) = [line for line in lines if line["message"] == "traced attempt 2"]
    assert (logged["trace_id"], logged["span_id"]) == (TRACE_ID, attempt.span_id)


async def test_a_drained_attempt_ends_released_and_the_next_claim_links_to_its_span(
    processes: Processes, run_store: RunStore, otlp: Receiver
) -> None:
    env = traced_env(otlp)
    first = processes.worker(**env, LEASEHOLD_DRAIN_TIMEOUT_S="0.2")
    created = await run_store.create(NewRun(handler="test.traced", input={}, traceparent=CALLER))
    run_id = created.run.id
    await wait_status(run_store, run_id, RunStatus.RUNNING)
    await spans_where(
        otlp, "the first attempt's effect span", lambda s: named(s, "leasehold.effect")
    )
    first.signal(signal.SIGTERM)  # drain: the hanging attempt is interrupted and released
    (released,) = named(
        await spans_where(otlp, "the released attempt", lambda s: named(s, "leasehold.attempt")),
        "leasehold.attempt",
    )
    assert [name for name, _ in released.events][-2:] == ["drain", "released"]
    assert released.parent_id == CALLER.split("-")[2]  # a run created with a trace context

    processes.worker(**env)
    done = await wait_status(run_store, run_id, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    attempts = named(
        await spans_where(otlp, "both attempts", lambda s: len(named(s, "leasehold.attempt")) == 2),
        "leasehold.attempt",
    )
    (second,) = [span for span in attempts if span.span_id != released.span_id]
    assert second.links == [(TRACE_ID, released.span_id)]
    assert (
        second.event("takeover")["leasehold.previous_fence"]
        == released.attributes["leasehold.fence"]
    )
