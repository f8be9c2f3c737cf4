"""The runs of a queue as clients see them: one store composed of its concerns.

Reading a run and its events (:mod:`.reading`), creating (:mod:`.creating`) and
listing (:mod:`.listing`) live in their own modules; here are the controls a client
has over a run: cancel (with the cascade to its children), delete, purge, resume
and resolve. Everything here is safe to call from any number of API
replicas at once; the transitions that change state are single Lua scripts.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from app.models import Run, RunStatus
from app.models.read import PurgeRequest, PurgeResult, ResolveRequest
from app.store.codec import (
    dumps,
)
from app.store.keys import GlobalKeys, queue_of_run
from app.store.lua.scripts import ScriptCode
from app.store.lua.transition import A, StatusReply, Transition, raise_for
from app.store.outbox.store import Outbox
from app.store.runs.bindings import (
    CANCEL_RUN,
    DELETE_RUN,
    RESOLVE_RUN,
    RESUME_RUN,
    CancelArgs,
    DeleteArgs,
    ResolveArgs,
    ResumeArgs,
)
from app.store.runs.creating import RunCreation
from app.store.runs.listing import RunListing, ScanBudget

log = logging.getLogger(__name__)


class RunStore(RunCreation, RunListing):
    """Holds a Redis client; every client-side transition of runs."""

    @property
    def global_keys(self) -> GlobalKeys:
        """Keys that span queues."""
        return GlobalKeys(self.prefix)

    async def cancel(self, run_id: str) -> RunStatus:
        """Ask a run to stop; returns its status afterwards (cancelled or cancelling).

        Idempotent. Raises :class:`RunNotFound`, or :class:`InvalidTransition` when
        the run already ended in another terminal state.
        """
        keys = self.keys(queue_of_run(run_id))
        args = CancelArgs(
            run_id, self.retention.script_arg(), self.events_maxlen, keys.cancel_channel
        )
        reply = await self._on_run(CANCEL_RUN, run_id, args, "cancel")
        if reply.status == RunStatus.CANCELLED.value:
            await self._cascade_now(run_id)
        return RunStatus(reply.status)

    async def _cascade_now(self, run_id: str) -> None:
        """A cancelled parent's children are cancelled at once (issue 17); never raises.

        One take of the outbox entry its end left; a run without children has none.
        What fails here stays in the outbox for the reconcilers' sweep.
        """
        try:
            await Outbox(self.ctx).deliver_end_of(run_id)
        except RedisError as exc:
            log.warning("the cascade of %s was left to the outbox sweep: %s", run_id, exc)

    async def delete(self, run_id: str) -> RunStatus:
        """Delete a finished run and every key of it now; returns the status it had.

        Raises :class:`RunNotFound` (also when already deleted or expired), or
        :class:`InvalidTransition` when the run is not terminal: nothing is deleted.
        """
        reply = await self._on_run(DELETE_RUN, run_id, DeleteArgs(run_id), "delete")
        return RunStatus(reply.status)

    async def _on_run(
        self, binding: Transition[A, StatusReply], run_id: str, args: A, action: str
    ) -> StatusReply:
        """Run a client's transition of one run, raising what its code means."""
        keys = self.keys(queue_of_run(run_id))
        reply = await binding.send(self.scripts, self.client, keys, args, run_id)
        raise_for(reply.code, run_id=run_id, status=reply.status, action=action)
        return reply

    async def purge(self, request: PurgeRequest, budget: ScanBudget | None = None) -> PurgeResult:
        """Delete one bounded batch of the finished runs the request's filters match.

        Looks at up to ``request.limit`` runs (newest first, as :meth:`list_runs`
        filters them by queue, status and handler), keeps the terminal ones that
        finished before ``finished_before``, and deletes them in one round trip.
        ``delete_run`` re-checks each inside Redis, so a run that is not terminal
        by then is never deleted; repeating a call deletes nothing twice. Raises
        :class:`InvalidCursor` for a cursor this store did not produce.
        """
        before = request.finished_before
        page = await self.list_runs(
            queue=request.queue,
            status=request.status,
            handler=request.handler,
            limit=request.limit,
            cursor=request.cursor,
            # a run finishes after it is created: one created later cannot match
            created_before_ms=None if before is None else int(before.timestamp() * 1000),
            budget=budget,
        )
        doomed = [
            run.id
            for run in page.items
            if run.status.is_terminal
            and (before is None or (run.finished_at is not None and run.finished_at < before))
        ]
        deleted: list[str] = []
        if doomed:
            replies = await self.scripts.pipeline(
                self.client,
                [DELETE_RUN.call(self.keys(queue_of_run(rid)), DeleteArgs(rid)) for rid in doomed],
            )
            deleted = [
                rid
                for rid, reply in zip(doomed, replies, strict=True)
                if DELETE_RUN.decode(reply).code == ScriptCode.OK
            ]
        return PurgeResult(
            deleted=len(deleted),
            ids=deleted,
            next_cursor=page.next_cursor,
            done=page.next_cursor is None,
        )

    async def resume(self, run_id: str, resume_input: Any) -> None:
        """Queue a ``waiting_human`` run again with a person's input (fence+1).

        Raises :class:`RunNotFound`, or :class:`InvalidTransition` for any other status.
        """
        keys = self.keys(queue_of_run(run_id))
        args = ResumeArgs(run_id, dumps(resume_input), self.events_maxlen, keys.wake_channel)
        await self._on_run(RESUME_RUN, run_id, args, "resume")

    async def resolve(self, run_id: str, decision: ResolveRequest) -> Run:
        """Apply a person's decision to a ``reconciliation_required`` run; returns the run.

        Raises :class:`RunNotFound`, or :class:`InvalidTransition` for any other status.
        """
        keys = self.keys(queue_of_run(run_id))
        args = ResolveArgs(
            run_id=run_id,
            action=decision.action,
            output=dumps(decision.output) if decision.action == "succeed" else "",
            effect_outcome=decision.effect_outcome or "",
            effect_result=(
                dumps(decision.effect_result) if decision.effect_outcome == "applied" else ""
            ),
            note=decision.note or "",
            retention=self.retention.script_arg(),
            maxlen=self.events_maxlen,
            wake_channel=keys.wake_channel,
        )
        await self._on_run(RESOLVE_RUN, run_id, args, "resolve")
        return await self.get(run_id)
