"""Hostile history documents: each is a clear ValueError before anything runs."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.testing import load_history, replay

GOOD: dict[str, Any] = {
    "version": 1,
    "run": {
        "id": "default.01J0",
        "queue": "default",
        "handler": "h",
        "status": "waiting",
        "attempt": 1,
    },
}


async def never_called(ctx: Any, params: Any) -> None:
    raise AssertionError("the handler ran on a refused history")


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ("{not json", "not JSON"),
        ("", "not JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({**GOOD, "version": 2}), "version 2"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "version"}), "version None"),
        (json.dumps({**GOOD, "steps": "e|a:1"}), "malformed"),
        (json.dumps({**GOOD, "run": {**GOOD["run"], "attempt": "many"}}), "malformed"),
        (json.dumps({**GOOD, "surprise": 1}), "malformed"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
        (json.dumps({**GOOD, "run": {**GOOD["run"], "handler": "ü" * 300}}), "malformed"),
    ],
)
def test_a_bad_history_is_a_clear_value_error(document: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        replay(document, never_called)


def test_a_history_over_the_size_bound_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(importlib.import_module("app.testing.replay"), "MAX_HISTORY_BYTES", 100)
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**GOOD, "events": [], "effects": {"x": {"pad": "p" * 200}}}))
    with pytest.raises(ValueError, match="at most 100"):
        load_history(path)
    with pytest.raises(ValueError, match="at most 100"):
        replay(path.read_bytes(), never_called)


def test_a_good_history_with_no_steps_runs_the_handler_to_its_first_step() -> None:
    async def one_effect(ctx: Any, params: Any) -> None:
        await ctx.effect("charge", lambda key: 1 / 0)  # never called: nothing recorded

    report = replay(json.dumps(GOOD), one_effect)
    assert report.ok and (report.outcome, report.stopped_at) == ("stopped", "e|charge:1")
