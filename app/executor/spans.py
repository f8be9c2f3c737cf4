"""The spans of one claimed run in a worker: its queue wait and its attempt.

An attempt's span is a child of the trace context the run was created with
(``traceparent`` on the record) and has the span id derived from (run id,
fence) (:func:`app.telemetry.tracing.attempt_traceparent`); a run created without a
trace context gets one derived from its id (fence 0 stands for the run), so
all its spans still share one trace. A claim that follows an
earlier one (a takeover after ``kill -9``, a retry, a release) links to the
earlier attempt's span and says so in a ``takeover`` event: the lost worker
never ended its span, but its children (operations, effects) name it as their
parent, so the trace shows what the lost attempt did and where it stopped.
"""

from __future__ import annotations

from app.store.leases.store import ClaimedRun
from app.telemetry.tracing import Span, attempt_traceparent, tracer


def attempt_span(claimed: ClaimedRun, owner_id: str) -> Span:
    """Start the attempt's span (and, on a first claim, record the queue wait before it)."""
    tr = tracer()
    if not tr.enabled:
        return tr.start_span("leasehold.attempt")
    run = run_traceparent(claimed)
    attributes = {"leasehold.run_id": claimed.id, "leasehold.queue": claimed.queue}
    links: list[str] = []
    if claimed.prior_fence is None:
        _queue_wait(claimed, run, attributes)
    else:
        links.append(attempt_traceparent(claimed.id, claimed.prior_fence, run))
    span = tr.start_span(
        f"leasehold.attempt {claimed.handler}",
        parent=run,
        links=links,
        span_context=attempt_traceparent(claimed.id, claimed.fence, run),
        attributes={
            **attributes,
            "leasehold.handler": claimed.handler,
            "leasehold.attempt": claimed.attempt,
            "leasehold.max_attempts": claimed.max_attempts,
            "leasehold.fence": claimed.fence,
            "leasehold.owner_id": owner_id,
        },
    )
    if claimed.prior_fence is not None:
        span.add_event(
            "takeover",
            {
                "leasehold.previous_fence": claimed.prior_fence,
                "leasehold.previous_owner_id": claimed.prior_owner or "",
            },
        )
    return span


def run_traceparent(claimed: ClaimedRun) -> str:
    """The context the run's spans are children of: the stored one, else one from its id."""
    return claimed.traceparent or attempt_traceparent(claimed.id, 0, None)


def _queue_wait(claimed: ClaimedRun, run: str, attributes: dict[str, str]) -> None:
    """From the create (Redis's clock) to this claim: how long the run waited for a worker."""
    if claimed.created_at_ms is None:
        return
    tracer().start_span(
        "leasehold.queue_wait",
        parent=run,
        start_ns=claimed.created_at_ms * 1_000_000,
        attributes=attributes,
    ).end()
