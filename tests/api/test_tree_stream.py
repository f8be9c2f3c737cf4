"""A run's tree seen from outside, against a real API server, real workers and real Redis.

GET /runs/{id}/events?include=children (the tree stream), GET /runs/{id}/children
and the parent_id / root_id list filters, on children spawned by ``ctx.spawn``
(tests/support/family_handlers.py). The merge order itself is attacked with
simulated timing in tests/api/test_tree_merge.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.api.tree import TreeKey
from app.models import RunStatus
from app.store.runs.new import NewRun
from app.store.runs.store import RunStore
from tests.support.polling import wait_status
from tests.support.processes import Processes


def fan_out_input(**extra: Any) -> dict[str, Any]:
    return {
        "handler": "test.fan_out",
        "input": {
            "children": 3,
            "handler": "demo.sleep",
            "child_input": {"seconds": 1.0, "progress_every_s": 0.1},
            "on_parent_end": "detach",  # the children go on after the parent returned
            **extra,
        },
    }


async def read_messages(
    http: httpx.AsyncClient, run_id: str, *, last_event_id: str | None, stop_after: int | None
) -> tuple[list[dict[str, Any]], bool]:
    """SSE messages of one connection to the tree stream; whether it reached tree_ended.

    ``stop_after``: drop the connection after that many messages with an id.
    """
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    messages: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with_id = 0
    async with http.stream(
        "GET", f"/runs/{run_id}/events", params={"include": "children"}, headers=headers
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(":")
                current[name] = value.removeprefix(" ")
                continue
            if not current:
                continue
            current["event_json"] = json.loads(current["data"])
            messages.append(current)
            current = {}
            with_id += "id" in messages[-1]
            if messages[-1]["event"] == "tree_ended":
                return messages, True
            if stop_after is not None and with_id >= stop_after:
                return messages, False  # leaving the block drops the connection
    return messages, False


async def test_a_fan_out_of_three_streams_every_event_of_all_four_runs_exactly_once_across_drops(
    processes: Processes, run_store: RunStore
) -> None:
    _, url = processes.api()
    processes.worker("--concurrency", "4")
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        created = await http.post("/runs", json=fan_out_input())
        parent = created.json()["id"]
        connections = []
        last: str | None = None
        for stop_after in (3, 6, None):  # two dropped connections, then one to the end
            messages, ended = await read_messages(
                http, parent, last_event_id=last, stop_after=stop_after
            )
            connections.append(messages)
            last = next((m["id"] for m in reversed(messages) if "id" in m), last)
            if ended:
                break
        assert ended, "the last connection did not reach tree_ended"
        children_page = (await http.get(f"/runs/{parent}/children", params={"limit": 2})).json()
        rest = (
            await http.get(
                f"/runs/{parent}/children", params={"cursor": children_page["next_cursor"]}
            )
        ).json()
        by_parent = (await http.get("/runs", params={"parent_id": parent})).json()
        by_root = (await http.get("/runs", params={"root_id": parent})).json()

    children = [item["id"] for item in children_page["items"] + rest["items"]]
    assert len(children) == 3 and rest["next_cursor"] is None
    assert len(children_page["items"]) == 2 and children_page["next_cursor"]
    for item in children_page["items"] + rest["items"]:
        assert (item["parent_id"], item["root_id"], item["depth"]) == (parent, parent, 1)
        assert item["status"] == "succeeded" and item["handler"] == "demo.sleep"
        assert item["finished_at"] and "input" not in item
    assert sorted(item["id"] for item in by_parent["items"]) == sorted(children)
    assert sorted(item["id"] for item in by_root["items"]) == sorted([parent, *children])

    # every stored event of the four runs, each delivered exactly once over the three connections
    stored = set()
    for run_id in [parent, *children]:
        await wait_status(run_store, run_id, RunStatus.SUCCEEDED)
        stored |= {(run_id, event.id) for event in await run_store.read_events(run_id)}
    delivered = [
        (m["event_json"]["run_id"], m["event_json"]["id"])
        for messages in connections
        for m in messages
        if "id" in m
    ]
    assert len(delivered) == len(set(delivered)), "an event came twice"
    assert set(delivered) == stored
    assert len(connections) == 3  # both drops happened before the tree ended
    # in one order: each connection's ids are increasing tree keys, and pick up where it left
    keys = [TreeKey.parse(m["id"]) for messages in connections for m in messages if "id" in m]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    # each message is tagged with its run, and its type is the SSE event name
    assert all(m["event"] == m["event_json"]["type"] for c in connections for m in c)
    assert connections[-1][-1]["event"] == "tree_ended" and "id" not in connections[-1][-1]
    terminal = [m for c in connections for m in c if m["event"] == "succeeded"]
    assert sorted(m["event_json"]["run_id"] for m in terminal) == sorted([parent, *children])


async def test_a_tree_past_its_bound_says_so_and_follows_only_the_first_runs(
    processes: Processes,
) -> None:
    _, url = processes.api(LEASEHOLD_TREE_STREAM_MAX_RUNS="2")
    processes.worker("--concurrency", "4")
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        parent = (await http.post("/runs", json=fan_out_input())).json()["id"]
        messages, ended = await read_messages(http, parent, last_event_id=None, stop_after=None)
        children = (await http.get(f"/runs/{parent}/children")).json()["items"]
    assert ended
    truncated = [m["event_json"] for m in messages if m["event"] == "tree_truncated"]
    assert len(truncated) == 1 and "id" not in next(
        m for m in messages if m["event"] == "tree_truncated"
    )
    assert truncated[0]["data"]["max_runs"] == 2
    assert truncated[0]["data"]["setting"] == "LEASEHOLD_TREE_STREAM_MAX_RUNS"
    followed = {m["event_json"]["run_id"] for m in messages if "id" in m}
    assert followed == {parent, children[0]["id"]}  # the parent and the first child spawned
    assert truncated[0]["data"]["first_not_followed"] == children[1]["id"]


ULID = "01HZX3A5B6C7D8E9F0G1H2J3K4"


async def test_careless_tree_requests_get_clear_4xx_answers(
    api: httpx.AsyncClient, run_store: RunStore
) -> None:
    unknown = f"default.{ULID}"
    parent = (await run_store.create(NewRun(handler="demo.echo", input={}))).run.id
    answers = {
        "unknown parent": await api.get(f"/runs/{unknown}/children"),
        "malformed id": await api.get("/runs/default.nope/children"),
        "limit 0": await api.get(f"/runs/{parent}/children", params={"limit": 0}),
        "limit 501": await api.get(f"/runs/{parent}/children", params={"limit": 501}),
        "foreign cursor": await api.get(f"/runs/{parent}/children", params={"cursor": "x" * 40}),
        "huge cursor": await api.get(f"/runs/{parent}/children", params={"cursor": "x" * 5000}),
        "bad parent filter": await api.get("/runs", params={"parent_id": "../etc"}),
        "bad root filter": await api.get("/runs", params={"root_id": "q" * 65 + "." + ULID}),
        "unknown include": await api.get(f"/runs/{parent}/events", params={"include": "kids"}),
        "tree of nobody": await api.get(f"/runs/{unknown}/events", params={"include": "children"}),
        "tree with a run-stream id": await api.get(
            f"/runs/{parent}/events",
            params={"include": "children"},
            headers={"Last-Event-ID": "1700000000000-0"},
        ),
        "tree with a huge id": await api.get(
            f"/runs/{parent}/events",
            params={"include": "children"},
            headers={"Last-Event-ID": "9" * 500},
        ),
    }
    statuses = {what: answer.status_code for what, answer in answers.items()}
    assert statuses == {
        "unknown parent": 404,
        "malformed id": 422,
        "limit 0": 422,
        "limit 501": 422,
        "foreign cursor": 400,
        "huge cursor": 422,
        "bad parent filter": 422,
        "bad root filter": 422,
        "unknown include": 422,
        "tree of nobody": 404,
        "tree with a run-stream id": 400,
        "tree with a huge id": 422,
    }
    for answer in answers.values():
        assert answer.headers["content-type"].startswith("application/problem+json")
    # a run without children is an empty page, not an error
    empty = await api.get(f"/runs/{parent}/children")
    assert empty.status_code == 200 and empty.json() == {
        "items": [],
        "next_cursor": None,
        "truncated": None,
    }
    assert (await run_store.get(parent)).status == RunStatus.QUEUED  # nothing changed
