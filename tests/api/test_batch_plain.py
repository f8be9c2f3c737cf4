"""Which batch items skip pydantic (batch_items._plain): exactly those the schema takes as they are.

Pure logic: the request model itself is the reference, item by item.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.api.routes.batch_items import _plain
from app.models.api import CreateRunRequest
from app.settings import Settings

NAMES = ["demo.echo", "a", "x" * 128, "x" * 129, "", "bad name", "demo.echo\n", "é", "a:b"]
QUEUES = ["default", "q-1_x", "x" * 64, "x" * 65, "", "a.b", "default\n", "ü"]


def _taken_as_it_is(item: dict[str, Any]) -> bool:
    try:
        body = CreateRunRequest.model_validate(item)
    except ValidationError:
        return False
    return all(getattr(body, name) == value for name, value in item.items())


def test_an_item_is_plain_only_if_the_schema_takes_it_unchanged_whatever_came_before() -> None:
    """The names a batch has matched are remembered; a name that did not match never is."""
    items: list[dict[str, Any]] = [
        {"handler": handler, "queue": queue, "idempotency_key": key, "input": {"n": 1}}
        for handler in NAMES
        for queue in QUEUES
        for key in ("k-1", "bad key", None)
    ]
    items += [{"handler": 1}, {"handler": "demo.echo", "queue": None}, {"handler": "demo.echo"}]
    handlers: set[str] = set()
    queues: set[str] = set()
    for item in items * 2:  # the second time every valid name is known
        expected = _taken_as_it_is(item)
        assert _plain(item, handlers, queues) is expected, item
        assert _plain(item, set(), set()) is expected, item
    assert handlers == {"demo.echo", "a", "x" * 128}
    assert queues == {"default", "q-1_x", "x" * 64}


async def test_a_judged_item_is_the_run_the_single_create_makes_field_for_field(
    settings: Settings,
) -> None:
    """BatchJudge builds each NewRun by position from a row of resolved options: every
    field, the encoded input too, is what new_run_of's keyword construction gives."""
    import dataclasses

    from app.api.app import create_app
    from app.api.bodies import validate_json
    from app.api.routes.batch_items import BatchJudge
    from app.api.routes.runs import new_run_of

    echo = {"handler": "demo.echo", "input": {"message": "hi"}}
    items: list[object] = [
        echo,
        {**echo, "idempotency_key": "k-1", "metadata": {"team": "a"}},
        {**echo, "queue": "default", "input": {"message": "é\u2028"}},
        {**echo, "max_attempts": 3, "retention_s": 60.0, "priority": 2},
        {**echo, "max_attempts": 3, "retention_s": 60.0, "priority": 2, "idempotency_key": "k"},
        {**echo, "budget": {"max_steps": 5}, "on_lease_expired": "retry"},
        {**echo, "run_at": "2020-01-01T00:00:00Z", "queued_ttl_s": 30},
        {**echo, "delay_s": 1.5, "concurrency_key": "c", "singleton_key": "s"},
        {"handler": "demo.sleep", "input": {"seconds": 1}},
        {"handler": "demo.sleep", "input": {"seconds": 2}, "metadata": {"n": 1}},
    ]
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        state = app.state.leasehold
        judge = BatchJudge(items, state)
        for i, item in enumerate(items * 2):  # the second time every row is remembered
            judged = judge.judged(item, i % len(items))
            alone = new_run_of(validate_json(CreateRunRequest, item, loc=("body",)), state, None)
            assert dataclasses.astuple(judged) == dataclasses.astuple(alone), item
