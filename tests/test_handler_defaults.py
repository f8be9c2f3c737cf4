"""@handler(...) defaults: validated at import time, and the backoff the worker derives."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.errors import InvalidHandlerDefaults
from app.executor.execution import RetryPolicy
from app.handlers import HandlerRegistry, handler


async def _noop(ctx: Any, params: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 10_000}, "max_attempts"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"on_lease_expired": "explode"}, "on_lease_expired"),
        ({"retry_backoff_s": math.inf}, "retry_backoff_s"),
        ({"retry_backoff_s": math.nan}, "retry_backoff_s"),
        ({"retry_backoff_s": -1}, "retry_backoff_s"),
        ({"retry_backoff_max_s": 1e300}, "retry_backoff_max_s"),
        ({"retry_backoff_s": 10, "retry_backoff_max_s": 1}, "below retry_backoff_s"),
        ({"budget": {"max_steps": 0}}, "budget.max_steps"),
        ({"budget": {"max_duration_s": -5}}, "budget.max_duration_s"),
        ({"budget": {"max_tokens": 5}}, "budget.max_tokens"),
    ],
)
def test_a_bad_default_fails_when_the_decorator_runs_naming_handler_and_field(
    options: dict[str, Any], names: str
) -> None:
    registry = HandlerRegistry()
    with pytest.raises(InvalidHandlerDefaults) as caught:

        @handler("bad.defaults", registry=registry, **options)
        async def bad(ctx: Any, params: Any) -> None:
            return None

    assert "bad.defaults" in str(caught.value)
    assert names in str(caught.value)
    assert len(registry) == 0, "nothing is registered when the defaults are refused"


def test_a_handler_without_defaults_has_none_and_good_ones_are_kept() -> None:
    registry = HandlerRegistry()
    handler("plain", registry=registry)(_noop)
    handler("tuned", registry=registry, max_attempts=5, budget={"max_steps": 3})(_noop)
    assert registry.get("plain").defaults.model_dump(exclude_none=True) == {}
    tuned = registry.get("tuned").defaults
    assert tuned.max_attempts == 5
    assert tuned.merged_budget(None) == {"max_steps": 3}
    # the request's budget wins field by field, the handler's fills the rest
    assert tuned.merged_budget({"max_duration_s": 9.0}) == {"max_steps": 3, "max_duration_s": 9.0}
    assert tuned.merged_budget({"max_steps": 1}) == {"max_steps": 1}


def test_the_handlers_backoff_wins_over_the_deployments_and_falls_through_field_by_field() -> None:
    registry = HandlerRegistry()
    handler("slow", registry=registry, retry_backoff_s=30.0)(_noop)
    handler("plain", registry=registry)(_noop)
    deployment = RetryPolicy(backoff_s=1.0, backoff_max_s=60.0)
    assert deployment.for_handler(registry.get("slow")) == RetryPolicy(30.0, 60.0)
    assert deployment.for_handler(registry.get("plain")) == deployment
    assert deployment.for_handler(None) == deployment
    # attempt 1's delay is in [first/2, first]: the handler's 30 s, not the setting's 1 s
    assert 15_000 <= deployment.for_handler(registry.get("slow")).delay_ms(1) <= 30_000
