"""Namespaces with real processes: a worker serves its own namespace's queues only.

Two workers on one Redis serve a queue of the same name, one in ``default`` and one
in ``acme``; a run made in each is run by the worker of its namespace and no other,
and a lease token names the namespace it was issued in.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.polling import eventually
from tests.support.processes import Processes

KEY = "k-namespaces-process-0123456789"
ADMIN = {"Authorization": f"Bearer {KEY}"}
ACME = {**ADMIN, "Leasehold-Namespace": "acme"}


async def finished(client: httpx.AsyncClient, run_id: str, headers: dict[str, str]) -> Any:
    async def probe() -> Any:
        return (await client.get(f"/runs/{run_id}", headers=headers)).json()

    return await eventually(
        probe, until=lambda run: run.get("status") == "succeeded", what=f"{run_id} succeeded"
    )


@pytest.mark.slow
async def test_each_namespace_s_worker_runs_its_own_runs(processes: Processes) -> None:
    processes.env.update(LEASEHOLD_API_KEYS=KEY, LEASEHOLD_QUEUES="work")
    _, api_url = processes.api()
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        assert (await client.put("/namespaces/acme", json={}, headers=ADMIN)).status_code == 201
        processes.worker(LEASEHOLD_NAMESPACE="acme")
        processes.worker()  # the default namespace's
        body = {"handler": "test.lease_claims", "input": {}, "queue": "work"}

        async def declared() -> int:
            return (await client.get("/queues/work", headers=ACME)).status_code

        # the acme worker declares its LEASEHOLD_QUEUES in acme when it starts
        await eventually(declared, until=lambda status: status == 200, what="acme's queue")
        in_acme = (await client.post("/runs", json=body, headers=ACME)).json()
        in_default = (await client.post("/runs", json=body, headers=ADMIN)).json()

        acme_run = await finished(client, in_acme["id"], ACME)
        default_run = await finished(client, in_default["id"], ADMIN)
    assert acme_run["output"]["ns"] == "acme"
    assert default_run["output"]["ns"] == "default"
    # each was claimed by the other namespace's worker never: the owners differ
    assert acme_run["output"]["owner"] != default_run["output"]["owner"]
    assert acme_run["output"]["claim"] == f"{acme_run['output']['owner']}/1"
