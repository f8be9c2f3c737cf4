"""Which batch items skip pydantic (batch_items._plain): exactly those the schema takes as they are.

Pure logic: the request model itself is the reference, item by item.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.api.routes.batch_items import _plain
from app.models import CreateRunRequest

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
