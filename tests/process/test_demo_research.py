"""demo.research end to end with a real worker: fan out to three sources, one tool hangs and
its first-progress budget ends that child alone, the parent fans in (settled) and summarises."""

from __future__ import annotations

from app.models import RunStatus
from app.store.family.tree import TreeStore
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import wait_status
from tests.support.processes import Processes


async def test_research_fans_out_to_three_sources_and_summarises_what_came_back(
    processes: Processes, run_store: RunStore
) -> None:
    processes.worker("--concurrency", "4")
    parent = (
        await run_store.create(NewRun(handler="demo.research", input={"topic": "leases"}))
    ).run.id
    done = await wait_status(run_store, parent, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert done.status == RunStatus.SUCCEEDED, done.error
    children = (await TreeStore(run_store.ctx).children_page(parent, limit=10)).items
    assert [c.handler for c in children] == ["demo.research_source"] * 3
    by_status = {c.status for c in children}
    assert by_status == {RunStatus.SUCCEEDED, RunStatus.FAILED}
    hung = [c for c in children if c.status == RunStatus.FAILED]
    assert len(hung) == 1
    assert (await run_store.get(hung[0].id)).error.code == "first_progress_timeout"
    output = done.output
    assert output["summary"] == "2 of 3 sources answered on leases"
    assert sorted(f["source"] for f in output["found"]) == ["forums", "papers"]
    assert output["failed"] == [
        {"child": hung[0].id, "status": "failed", "code": "first_progress_timeout"}
    ]
